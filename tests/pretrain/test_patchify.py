"""The on-device patchify equals the Qwen2-VL PIL image processor (images) and the video-patch layout (clips)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_models import noise_image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from sparsectx.data.video import Video
from sparsectx.models.video_input import video_patches
from sparsectx.pretrain.patchify import patchify, patchify_clips


def test_patchify_matches_processor():
    side = 112
    processor = Qwen2VLImageProcessorPil(
        size={"shortest_edge": side * side, "longest_edge": side * side},
        patch_size=14,
        merge_size=2,
        temporal_patch_size=2,
    )
    images = [noise_image(side, side, seed) for seed in range(3)]
    reference = processor(images=images, return_tensors="pt")
    batch = torch.from_numpy(np.stack([np.asarray(im) for im in images]))
    pixels, grid = patchify(batch, processor.image_mean, processor.image_std, 14, 2, 2)
    assert torch.equal(grid, reference["image_grid_thw"])
    torch.testing.assert_close(pixels, reference["pixel_values"].float(), atol=1e-5, rtol=1e-5)


def test_patchify_clips_matches_video_patches():
    """Clips take the project's video-patch layout (itself checked against HF's video processor), exactly."""
    side, frames = 56, 6
    processor = Qwen2VLImageProcessorPil(
        size={"shortest_edge": 56 * 56, "longest_edge": 56 * 56},
        patch_size=14,
        merge_size=2,
        temporal_patch_size=2,
    )
    clips = [[noise_image(side, side, 10 * clip + f) for f in range(frames)] for clip in range(2)]
    references = [
        video_patches(Video(tuple(c), tuple(range(frames)), 2.0, frames, f"clip {n}"), processor)
        for n, c in enumerate(clips)
    ]
    batch = torch.from_numpy(np.stack([np.stack([np.asarray(f) for f in c]) for c in clips]))
    pixels, grid = patchify_clips(batch, processor.image_mean, processor.image_std, 14, 2, 2)
    assert torch.equal(grid, torch.stack([g for _, g in references]))
    torch.testing.assert_close(pixels, torch.cat([rows for rows, _ in references]).float(), atol=1e-5, rtol=1e-5)


def test_patchify_clips_refuses_a_partial_temporal_patch():
    with pytest.raises(ValueError, match="clips of 3 frames do not split into temporal patches of 2"):
        patchify_clips(torch.zeros(1, 3, 28, 28, 3, dtype=torch.uint8), [0.5] * 3, [0.5] * 3, 14, 2, 2)
