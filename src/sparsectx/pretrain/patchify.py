"""Batched, on-device equivalent of the Qwen2-VL image processor (and its video layout) for fixed-size inputs.

Data workers ship decoded uint8 images (150 KB each) or clips instead of float patches (~5 MB each); the
normalisation and patch layout happen here, on the GPU. ``tests/pretrain/test_patchify.py`` checks the
result against the processor (images) and ``sparsectx.models.video_input.video_patches`` (clips) in layout
exactly and to float rounding in value.
"""

from __future__ import annotations

import torch


def patchify_clips(
    clips: torch.Tensor, mean: list[float], std: list[float], patch: int, merge: int, temporal: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (B * t * gh * gw, C * temporal * patch^2) pixel values and (B, 3) grids (t, gh, gw) for uint8
    clips (B, T, H, W, C), T a multiple of ``temporal``.

    Layout matches HF's Qwen2-VL video patches: temporal patches in order, inside each the merge blocks in
    raster order, the merge x merge patches of a block consecutive, each patch flattened as
    (C, temporal, patch, patch) over the ``temporal`` consecutive frames of its temporal patch.
    """
    batch, frames, height, width, channels = clips.shape
    if frames % temporal:
        raise ValueError(f"clips of {frames} frames do not split into temporal patches of {temporal}")
    groups, gh, gw = frames // temporal, height // patch, width // patch
    x = clips.permute(0, 1, 4, 2, 3).float() / 255.0
    mean_t = torch.tensor(mean, device=x.device).view(1, 1, -1, 1, 1)
    std_t = torch.tensor(std, device=x.device).view(1, 1, -1, 1, 1)
    x = (x - mean_t) / std_t
    x = x.reshape(batch, groups, temporal, channels, gh // merge, merge, patch, gw // merge, merge, patch)
    x = x.permute(0, 1, 4, 7, 5, 8, 3, 2, 6, 9)  # (B, t, gh/m, gw/m, mh, mw, C, temporal, ph, pw)
    pixel_values = x.reshape(batch * groups * gh * gw, channels * temporal * patch * patch)
    grid = torch.tensor([groups, gh, gw], device=x.device).expand(batch, 3)
    return pixel_values, grid


def patchify(
    images: torch.Tensor, mean: list[float], std: list[float], patch: int, merge: int, temporal: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (B * gh * gw, C * temporal * patch^2) pixel values and (B, 3) grids for uint8 images (B, H, W, C).

    An image is a clip of ``temporal`` copies of its still frame, as the processor repeats it.
    """
    still = images.unsqueeze(1).expand(-1, temporal, -1, -1, -1)
    return patchify_clips(still, mean, std, patch, merge, temporal)
