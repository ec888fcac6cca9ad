"""Qwen2.5-VL: window-attention vision tower; signals from the last full-attention block."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.vision_utils import get_vision_window_index

from sparsectx.models.family import FamilySpec, periodic_miniature, scaled_sections, tiny_decoder
from sparsectx.models.qwen_common import QWEN_VL_SPECIAL_TOKENS, QwenVLAdapter, VisionLayout
from sparsectx.models.vision_costs import Grid, packed_tower_flops


def _signal_block(visual: nn.Module) -> nn.Module:
    return visual.blocks[max(visual.fullatt_block_indexes)].attn


def _object_block(visual: nn.Module) -> nn.Module:
    """Block depth // 2 - 1: HiPrune's Qwen2.5-VL object layer 16 of 32 (1-indexed), a full-attention block
    in every released checkpoint (fullatt_block_indexes [7, 15, 23, 31]); a windowed one in smaller towers,
    where its attention stays inside each window."""
    return visual.blocks[len(visual.blocks) // 2 - 1].attn


def _to_raster(visual: nn.Module, grid_thw: torch.Tensor) -> torch.Tensor:
    # Every block (windowed or full) and the merger run in window order: the tower permutes once before
    # block 0 and un-permutes only the merger output, so one permutation serves every recorded block.
    window_index, _ = get_vision_window_index(
        grid_thw,
        spatial_merge_size=visual.spatial_merge_size,
        window_size=visual.window_size,
        patch_size=visual.patch_size,
    )
    return torch.argsort(window_index.to(grid_thw.device))


LAYOUT = VisionLayout(signal_block=_signal_block, to_raster=_to_raster, has_deepstack=False, object_block=_object_block)

NAME = "qwen2_5_vl"

SPECIAL_TOKENS = QWEN_VL_SPECIAL_TOKENS
"""Qwen2.5-VL keeps the Qwen2-VL tokenizer (``qwen_common.QWEN_VL_SPECIAL_TOKENS``)."""


def _adapter(model: nn.Module, signal_chunk: int) -> QwenVLAdapter:
    return QwenVLAdapter(NAME, model, LAYOUT, signal_chunk)


def _tiny_config(published: dict[str, Any]) -> dict[str, Any]:
    """Returns Qwen2.5-VL's tiny config.json (the published layout, decoder keys at the top level): a 2-layer
    decoder of width 64 with 4 heads of 16 and M-RoPE sections in the published proportion; a vision tower of
    width 32 whose periods of windowed blocks closing on a full-attention block (``fullatt_block_indexes``
    [7, 15, 23, 31] of 32) become periods of 2, one windowed then one full. Patch, merge, temporal patch and
    ``window_size`` stay as published."""
    config = copy.deepcopy(published)
    text = config.get("text_config", config)
    tiny_decoder(text, heads=4, kv_heads=2)
    rope = text.get("rope_parameters") or text["rope_scaling"]
    rope["mrope_section"] = scaled_sections(rope["mrope_section"], 64 // 4 // 2)
    vision = config["vision_config"]
    full, depth = periodic_miniature(vision["fullatt_block_indexes"], vision["depth"], period=2)
    vision.update(
        depth=depth, fullatt_block_indexes=full, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64
    )
    return config


def _vision_flops(vision: PretrainedConfig, grids: Sequence[Grid]) -> float:
    """Returns the tower's FLOPs (``vision_costs.packed_tower_flops``): windowed blocks but the
    ``fullatt_block_indexes``, a SwiGLU MLP (gate, up, down: ``Qwen2_5_VLMLP``), one merger."""
    return packed_tower_flops(vision, grids, set(vision.fullatt_block_indexes), mlp_matmuls=3, mergers=1)


SPEC = FamilySpec(
    name=NAME,
    model_types=("qwen2_5_vl",),
    architectures=("Qwen2_5_VLForConditionalGeneration",),
    adapter=_adapter,
    special_tokens=SPECIAL_TOKENS,
    tiny_config=_tiny_config,
    image_processors={"Qwen2VLImageProcessor": Qwen2VLImageProcessorPil},
    image_marker="<|image_pad|>",
    video_layout="grid",
    thinking_switch=None,
    vision_flops=_vision_flops,
    source="Qwen/Qwen2.5-VL-7B-Instruct and -3B-Instruct config.json / preprocessor_config.json (model_type "
    "qwen2_5_vl, Qwen2VLImageProcessor, min/max_pixels 3136/12845056); transformers 5.17 "
    "models/auto/image_processing_auto.py maps qwen2_5_vl to Qwen2VLImageProcessor(Pil)",
)
"""Qwen2.5-VL: its chat template renders ``<|vision_start|><|image_pad|><|vision_end|>`` and has no thinking
switch (src/sparsectx/assets/published/Qwen2.5-VL-7B-Instruct/SOURCES.md)."""
