"""GLM-4.6V (``glm46v``): a full-attention vision tower in raster order, a downsampling merger, 3-D M-RoPE.

GLM-4.6V's interfaces match the Qwen-VL adapter's: ``model.model.visual`` (patch embed, blocks, a conv that
merges each 2x2 unit, then the merger MLP), ``pooler_output`` per merged token, a text model taking (3, B, L)
positions. Its ``get_rope_index`` gives an image of merged grid (1, h, w) the Qwen triples and advances by
max(h, w), so ``models.positions.rope_positions`` serves it (tested against it). Pruner signals come from
the last vision block (every block attends over the whole image), in the merge-unit order the merger reads.
Its decoder's rotary is interleaved and partial; ``in_llm`` uses each decoder's own rotary function.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil
from transformers.models.glm46v.image_processing_pil_glm46v import Glm46VImageProcessorPil

from sparsectx.models.family import FamilySpec
from sparsectx.models.qwen_common import QwenVLAdapter, VisionLayout


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


def _adapter(model: nn.Module, signal_chunk: int) -> QwenVLAdapter:
    return QwenVLAdapter(NAME, model, LAYOUT, signal_chunk)


SPEC = FamilySpec(
    name=NAME,
    model_types=("glm46v", "glm4v"),
    architectures=("Glm46VForConditionalGeneration", "Glm4vForConditionalGeneration"),
    adapter=_adapter,
    image_processors={"Glm46VImageProcessor": Glm46VImageProcessorPil, "Glm4vImageProcessor": Glm4vImageProcessorPil},
    image_marker="<|image|>",
    video_layout="glm_frames",
    thinking_switch="enable_thinking",
    temporal_in_pixel_bounds=True,
    source="zai-org/GLM-4.6V-Flash config.json declares model_type glm4v / Glm4vForConditionalGeneration "
    "(issue 36); transformers 5.17 models/glm46v/modular_glm46v.py: Glm46VForConditionalGeneration, "
    "Glm46VImageProcessorPil subclass the glm4v classes unchanged, so one adapter serves both names",
)
"""GLM-4.6V (published as ``glm4v``): marker ``<|image|>`` inside ``<|begin_of_image|>``/``<|end_of_image|>``;
the video layout is ``Glm46VProcessor``'s (``{t:.1f} seconds`` after each frame; ``Glm4vProcessor`` writes
integer seconds, not built)."""
