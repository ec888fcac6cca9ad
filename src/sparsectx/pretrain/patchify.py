"""Batched, on-device equivalent of the Qwen2-VL image processor for fixed-size images.

Data workers ship decoded uint8 images (150 KB each) instead of float patches (~5 MB each); the
normalisation and patch layout happen here, on the GPU. ``tests/pretrain/test_patchify.py`` checks the
result against the processor byte for byte in layout and to float rounding in value.
"""

from __future__ import annotations

import torch


def patchify(
    images: torch.Tensor, mean: list[float], std: list[float], patch: int, merge: int, temporal: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (B * gh * gw, C * temporal * patch^2) pixel values and (B, 3) grids for uint8 images (B, H, W, C).

    Layout matches the processor: merge blocks in raster order, the merge x merge patches of a block
    consecutive, each patch flattened as (C, temporal, patch, patch) with the still frame repeated.
    """
    batch, height, width, channels = images.shape
    gh, gw = height // patch, width // patch
    x = images.permute(0, 3, 1, 2).float() / 255.0
    mean_t = torch.tensor(mean, device=x.device).view(1, -1, 1, 1)
    std_t = torch.tensor(std, device=x.device).view(1, -1, 1, 1)
    x = (x - mean_t) / std_t
    x = x.reshape(batch, channels, gh // merge, merge, patch, gw // merge, merge, patch)
    x = x.permute(0, 2, 5, 3, 6, 1, 4, 7)  # (B, gh/m, gw/m, mh, mw, C, ph, pw)
    x = x.unsqueeze(6).expand(*x.shape[:6], temporal, patch, patch)
    pixel_values = x.reshape(batch * gh * gw, channels * temporal * patch * patch)
    grid = torch.tensor([1, gh, gw], device=x.device).expand(batch, 3)
    return pixel_values, grid
