"""Qwen2.5-VL: window-attention vision tower; signals from the last full-attention block."""

from __future__ import annotations

import torch
from torch import nn
from transformers.vision_utils import get_vision_window_index

from sparsectx.models.qwen_common import VisionLayout


def _signal_block(visual: nn.Module) -> nn.Module:
    return visual.blocks[max(visual.fullatt_block_indexes)].attn


def _to_raster(visual: nn.Module, grid_thw: torch.Tensor) -> torch.Tensor:
    window_index, _ = get_vision_window_index(
        grid_thw,
        spatial_merge_size=visual.spatial_merge_size,
        window_size=visual.window_size,
        patch_size=visual.patch_size,
    )
    return torch.argsort(window_index.to(grid_thw.device))


LAYOUT = VisionLayout(signal_block=_signal_block, to_raster=_to_raster, has_deepstack=False)
