"""Qwen3-VL: full-attention vision tower in raster order, DeepStack features pruned like the main stream."""

from __future__ import annotations

import torch
from torch import nn
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from sparsectx.models.family import FamilySpec
from sparsectx.models.qwen_common import QwenVLAdapter, VisionLayout


def _signal_block(visual: nn.Module) -> nn.Module:
    return visual.blocks[len(visual.blocks) - 1].attn


def _object_block(visual: nn.Module) -> nn.Module:
    """Block depth // 2 - 1, the Qwen2.5-VL rule (HiPrune has no Qwen3-VL port): block 12 of 27."""
    return visual.blocks[len(visual.blocks) // 2 - 1].attn


def _to_raster(_visual: nn.Module, _grid_thw: torch.Tensor) -> None:
    return None


LAYOUT = VisionLayout(signal_block=_signal_block, to_raster=_to_raster, has_deepstack=True, object_block=_object_block)

NAME = "qwen3_vl"


def _adapter(model: nn.Module, signal_chunk: int) -> QwenVLAdapter:
    return QwenVLAdapter(NAME, model, LAYOUT, signal_chunk)


SPEC = FamilySpec(
    name=NAME,
    model_types=("qwen3_vl",),
    architectures=("Qwen3VLForConditionalGeneration",),
    adapter=_adapter,
    image_processors={"Qwen2VLImageProcessor": Qwen2VLImageProcessorPil},
    image_marker="<|image_pad|>",
    video_layout="timestamps",
    thinking_switch=None,
    source="Qwen/Qwen3-VL-4B-Instruct and -8B-Instruct config.json / preprocessor_config.json (model_type "
    "qwen3_vl, Qwen2VLImageProcessorFast, patch 16, size 65536..16777216, mean/std 0.5); transformers 5.17 "
    "models/auto/image_processing_auto.py maps qwen3_vl to Qwen2VLImageProcessor(Pil)",
)
"""Qwen3-VL Instruct: no thinking switch in its template (the Thinking checkpoints are separate models)."""
