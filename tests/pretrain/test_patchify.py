"""The on-device patchify equals the Qwen2-VL PIL image processor."""

from __future__ import annotations

import numpy as np
import torch
from tiny_models import noise_image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from sparsectx.pretrain.patchify import patchify


def test_patchify_matches_processor():
    side = 112
    processor = Qwen2VLImageProcessorPil(
        size={"shortest_edge": side * side, "longest_edge": side * side}, patch_size=14, merge_size=2,
        temporal_patch_size=2,
    )
    images = [noise_image(side, side, seed) for seed in range(3)]
    reference = processor(images=images, return_tensors="pt")
    batch = torch.from_numpy(np.stack([np.asarray(im) for im in images]))
    pixels, grid = patchify(batch, processor.image_mean, processor.image_std, 14, 2, 2)
    assert torch.equal(grid, reference["image_grid_thw"])
    torch.testing.assert_close(pixels, reference["pixel_values"].float(), atol=1e-5, rtol=1e-5)
