"""Qwen3-VL: full-attention vision tower in raster order, DeepStack features pruned like the main stream."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from sparsectx.models.family import FamilySpec, periodic_miniature, scaled_sections, tiny_decoder
from sparsectx.models.qwen_common import QWEN_VL_SPECIAL_TOKENS, QwenVLAdapter, VisionLayout
from sparsectx.models.vision_costs import Grid, packed_tower_flops


def _signal_block(visual: nn.Module) -> nn.Module:
    return visual.blocks[len(visual.blocks) - 1].attn


def _object_block(visual: nn.Module) -> nn.Module:
    """Block depth // 2 - 1, the Qwen2.5-VL rule (HiPrune has no Qwen3-VL port): block 12 of 27."""
    return visual.blocks[len(visual.blocks) // 2 - 1].attn


def _to_raster(_visual: nn.Module, _grid_thw: torch.Tensor) -> None:
    return None


LAYOUT = VisionLayout(signal_block=_signal_block, to_raster=_to_raster, has_deepstack=True, object_block=_object_block)

NAME = "qwen3_vl"

SPECIAL_TOKENS = {**QWEN_VL_SPECIAL_TOKENS, 151667: "<think>", 151668: "</think>"}
"""The Qwen3 tokenizer's special tokens that Qwen3-VL's config.json ids and chat template name (Qwen2-VL's
151643-151664, then ``<tool_response>`` pair and ``<think>`` pair at 151665-151668)."""


def _adapter(model: nn.Module, signal_chunk: int) -> QwenVLAdapter:
    return QwenVLAdapter(NAME, model, LAYOUT, signal_chunk)


def _tiny_config(published: dict[str, Any]) -> dict[str, Any]:
    """Returns Qwen3-VL's tiny config.json: a vision tower of width 32 whose DeepStack taps
    (``deepstack_visual_indexes`` [5, 11, 17] of 24, each closing a period of 6 blocks) close periods of 2,
    and a decoder of width 64 with one layer per tap plus one (each DeepStack level is added after its own
    layer), 4 heads of 32 and M-RoPE sections in the published proportion. Patch, merge, temporal patch and
    ``num_position_embeddings`` stay as published."""
    config = copy.deepcopy(published)
    vision = config["vision_config"]
    taps, depth = periodic_miniature(vision["deepstack_visual_indexes"], vision["depth"], period=2)
    vision.update(
        depth=depth,
        deepstack_visual_indexes=taps,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        out_hidden_size=64,
    )
    text = config["text_config"]
    tiny_decoder(text, heads=4, kv_heads=2, layers=len(taps) + 1, head_dim=32)
    rope = text.get("rope_parameters") or text["rope_scaling"]
    rope["mrope_section"] = scaled_sections(rope["mrope_section"], 32 // 2)
    return config


def _vision_flops(vision: PretrainedConfig, grids: Sequence[Grid]) -> float:
    """Returns the tower's FLOPs (``vision_costs.packed_tower_flops``): full attention in every block, a
    two-layer MLP (``Qwen3VLVisionMLP``: fc1, fc2), the merger plus one per DeepStack level."""
    full = set(range(vision.depth))
    return packed_tower_flops(vision, grids, full, mlp_matmuls=2, mergers=1 + len(vision.deepstack_visual_indexes))


SPEC = FamilySpec(
    name=NAME,
    model_types=("qwen3_vl",),
    architectures=("Qwen3VLForConditionalGeneration",),
    adapter=_adapter,
    special_tokens=SPECIAL_TOKENS,
    tiny_config=_tiny_config,
    image_processors={"Qwen2VLImageProcessor": Qwen2VLImageProcessorPil},
    image_marker="<|image_pad|>",
    video_layout="timestamps",
    thinking_switch=None,
    vision_flops=_vision_flops,
    source="Qwen/Qwen3-VL-4B-Instruct and -8B-Instruct config.json / preprocessor_config.json (model_type "
    "qwen3_vl, Qwen2VLImageProcessorFast, patch 16, size 65536..16777216, mean/std 0.5); transformers 5.17 "
    "models/auto/image_processing_auto.py maps qwen3_vl to Qwen2VLImageProcessor(Pil)",
)
"""Qwen3-VL Instruct: no thinking switch in its template (the Thinking checkpoints are separate models)."""
