"""GLM-4.6V (``glm46v``): a full-attention vision tower in raster order, a downsampling merger, 3-D M-RoPE.

GLM-4.6V's interfaces match the Qwen-VL adapter's: ``model.model.visual`` (patch embed, blocks, a conv that
merges each 2x2 unit, then the merger MLP), ``pooler_output`` per merged token, a text model taking (3, B, L)
positions. Its ``get_rope_index`` gives an image of merged grid (1, h, w) the Qwen triples and advances by
max(h, w), so ``models.positions.rope_positions`` serves it (tested against it). Pruner signals come from
the last vision block (every block attends over the whole image), in the merge-unit order the merger reads.
Its decoder's rotary is interleaved and partial; ``in_llm`` uses each decoder's own rotary function.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig
from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil
from transformers.models.glm46v.image_processing_pil_glm46v import Glm46VImageProcessorPil

from sparsectx.models.family import FamilySpec, scaled_sections, tiny_decoder
from sparsectx.models.qwen_common import QwenVLAdapter, VisionLayout
from sparsectx.models.vision_costs import Grid, attention_segments


def _signal_block(visual: nn.Module) -> nn.Module:
    return visual.blocks[len(visual.blocks) - 1].attn


def _object_block(visual: nn.Module) -> nn.Module:
    """Block depth // 2 - 1, the Qwen rule (HiPrune has no GLM port): block 12 of 24 in GLM-4.6V-Flash."""
    return visual.blocks[len(visual.blocks) // 2 - 1].attn


def _to_raster(_visual: nn.Module, _grid_thw: torch.Tensor) -> None:
    return None


LAYOUT = VisionLayout(
    signal_block=_signal_block,
    to_raster=_to_raster,
    has_deepstack=False,
    object_block=_object_block,
    merger_merges=False,
)

NAME = "glm46v"

SPECIAL_TOKENS = {
    151329: "<|endoftext|>",
    151331: "[gMASK]",
    151333: "<sop>",
    151335: "<|system|>",
    151336: "<|user|>",
    151337: "<|assistant|>",
    151338: "<|observation|>",
    151339: "<|begin_of_image|>",
    151340: "<|end_of_image|>",
    151341: "<|begin_of_video|>",
    151342: "<|end_of_video|>",
    151350: "<think>",
    151351: "</think>",
    151363: "<|image|>",
    151364: "<|video|>",
}
"""The GLM-4 tokenizer's special tokens that GLM-4.6V's config.json ids (eos 151329/151336/151338, the image and
video ids) and chat template name; GLM-4.5's layout for the template's ``<think>`` pair."""


def _adapter(model: nn.Module, signal_chunk: int) -> QwenVLAdapter:
    return QwenVLAdapter(NAME, model, LAYOUT, signal_chunk)


def _tiny_config(published: dict[str, Any]) -> dict[str, Any]:
    """Returns GLM-4.6V's tiny config.json: a 2-layer decoder of width 64 with 2 query heads and 1 KV head
    (GLM's grouped-query shape) of 32, its published partial rotary factor over them and M-RoPE sections in the
    published proportion over the rotary pairs left (0.5 x 32 / 2 = 8: [8, 12, 12] -> [2, 3, 3]); a 2-block
    vision tower of width 32. Patch, merge, temporal patch and ``image_size`` stay as published."""
    config = copy.deepcopy(published)
    text = config["text_config"]
    tiny_decoder(text, heads=2, kv_heads=1)
    rope = text["rope_parameters"]
    partial = rope.get("partial_rotary_factor", text.get("partial_rotary_factor"))
    rope["mrope_section"] = scaled_sections(rope["mrope_section"], int(64 // 2 * partial) // 2)
    config["vision_config"].update(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64)
    return config


def _vision_flops(vision: PretrainedConfig, grids: Sequence[Grid]) -> float:
    """Returns GLM-4.6V's tower FLOPs (counted as ``vision_costs`` counts): full attention per frame, a SwiGLU
    MLP as wide as ``out_hidden_size``, then a strided convolution over each 2x2 patch group and a SwiGLU merger
    of width ``intermediate_size``."""
    dv, dout, unit = vision.hidden_size, vision.out_hidden_size, vision.spatial_merge_size**2
    n = float(sum(t * h * w for t, h, w in grids))
    total = 2 * n * vision.in_channels * vision.temporal_patch_size * vision.patch_size**2 * dv
    segments = [s for grid in grids for s in attention_segments(vision, grid, windowed=False)]
    total += vision.depth * (8 * n * dv * dv + 4 * dv * sum(float(s) ** 2 for s in segments) + 6 * n * dv * dout)
    merged = n / unit
    return total + 2 * merged * unit * dv * dout + 2 * merged * (dout * dout + 3 * dout * vision.intermediate_size)


SPEC = FamilySpec(
    name=NAME,
    model_types=("glm46v", "glm4v"),
    architectures=("Glm46VForConditionalGeneration", "Glm4vForConditionalGeneration"),
    adapter=_adapter,
    special_tokens=SPECIAL_TOKENS,
    tiny_config=_tiny_config,
    image_processors={"Glm46VImageProcessor": Glm46VImageProcessorPil, "Glm4vImageProcessor": Glm4vImageProcessorPil},
    image_marker="<|image|>",
    video_layout="glm_frames",
    thinking_switch="enable_thinking",
    temporal_in_pixel_bounds=True,
    vision_flops=_vision_flops,
    source="zai-org/GLM-4.6V-Flash config.json declares model_type glm4v / Glm4vForConditionalGeneration "
    "(issue 36); transformers 5.17 models/glm46v/modular_glm46v.py: Glm46VForConditionalGeneration, "
    "Glm46VImageProcessorPil subclass the glm4v classes unchanged, so one adapter serves both names",
)
"""GLM-4.6V (published as ``glm4v``): marker ``<|image|>`` inside ``<|begin_of_image|>``/``<|end_of_image|>``;
the video layout is ``Glm46VProcessor``'s (``{t:.1f} seconds`` after each frame; ``Glm4vProcessor`` writes
integer seconds, not built)."""
