"""Qwen3-VL: full-attention vision tower in raster order, DeepStack features pruned like the main stream."""

from __future__ import annotations

import torch
from torch import nn

from sparsectx.models.qwen_common import VisionLayout


def _signal_block(visual: nn.Module) -> nn.Module:
    return visual.blocks[len(visual.blocks) - 1].attn


def _object_block(visual: nn.Module) -> nn.Module:
    """Block depth // 2 - 1, the Qwen2.5-VL rule (HiPrune has no Qwen3-VL port): block 12 of 27."""
    return visual.blocks[len(visual.blocks) // 2 - 1].attn


def _to_raster(_visual: nn.Module, _grid_thw: torch.Tensor) -> None:
    return None


LAYOUT = VisionLayout(
    signal_block=_signal_block, to_raster=_to_raster, has_deepstack=True, object_block=_object_block
)
