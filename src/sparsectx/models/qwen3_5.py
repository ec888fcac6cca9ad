"""Qwen3.5: Qwen3-VL's full-attention vision tower without DeepStack, and a hybrid decoder.

Three of every four decoder layers are linear attention (a gated delta rule after a causal depthwise
convolution over the sequence), every fourth is full attention. Pruning is physical removal: a dropped
visual token never enters the sequence, so it is absent from the keys of the full-attention layers, from
the linear layers' recurrent state and from the convolution window of its neighbours, whose inputs move
up by the removed slots. "Removal equals masking the token as an attention key" (design invariant 2) holds
for the full-attention layers only: a key mask cannot take a token out of a recurrent state or a
convolution (``tests/models/test_qwen3_5.py`` checks both sides). What holds for every layer: budget 1.0
is the plain HF model, kept tokens keep their unpruned M-RoPE positions (the family's ``get_rope_index``),
and decoding from the cache (KV for full layers, convolution and recurrent state for linear layers,
``sparsectx.engine.hybrid_slots``) equals a full re-forward of the same pruned context.

In-LLM pruning (``pruner.stage: llm``) is refused (``SPEC.in_llm_unsupported``): in-LLM operators score
decoder layer K-1's attention row, which linear-attention layers (layers 0-2 of every four, including the
default K - 1 = 1) do not have, and the in-LLM hook passes one causal mask to every layer where linear layers
need the 2D padding mask.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from sparsectx.models.adapter import LLMInputs
from sparsectx.models.family import FamilySpec, tiny_decoder
from sparsectx.models.in_llm import LayerSignals
from sparsectx.models.qwen_common import QwenVLAdapter, VisionLayout
from sparsectx.models.vision_costs import Grid, packed_tower_flops

FAMILY = "qwen3_5"


def _signal_block(visual: nn.Module) -> nn.Module:
    return visual.blocks[len(visual.blocks) - 1].attn


def _object_block(visual: nn.Module) -> nn.Module:
    """Block depth // 2 - 1, the Qwen2.5-VL rule as for Qwen3-VL (HiPrune has no Qwen3.5 port)."""
    return visual.blocks[len(visual.blocks) // 2 - 1].attn


def _to_raster(_visual: nn.Module, _grid_thw: torch.Tensor) -> None:
    return None


LAYOUT = VisionLayout(signal_block=_signal_block, to_raster=_to_raster, has_deepstack=False, object_block=_object_block)
"""Every vision block attends over the whole image in raster order; no DeepStack features."""


class Qwen35Adapter(QwenVLAdapter):
    """``VLMAdapter`` for ``Qwen3_5ForConditionalGeneration``: pre-LLM pruning by physical removal only.

    The vision side (encode once, signals from the last block, raster order) is the shared Qwen-VL adapter's.
    ``run_llm`` runs the HF text model, which builds each layer type's mask itself (the 4D causal mask for
    full attention, the 2D padding mask for linear attention, nothing for a one-token decode step).
    """

    def __init__(self, model: nn.Module, signal_chunk: int) -> None:
        super().__init__(FAMILY, model, LAYOUT, signal_chunk)

    def run_llm(self, inputs: LLMInputs, cache: object | None) -> torch.Tensor:
        """Returns (B, L, D) final-norm hidden states; an in-LLM selection (``inputs.late``) is refused."""
        if inputs.late is not None:
            raise SPEC.in_llm_refusal(inputs.late.layer)
        return super().run_llm(inputs, cache)

    def llm_signals(self, inputs: LLMInputs, layer: int, query_index: torch.Tensor) -> LayerSignals:
        """Raises the in-LLM refusal: Qwen3.5 gives in-LLM pruners no layer signals (see the module doc)."""
        raise SPEC.in_llm_refusal(layer)


SPECIAL_TOKENS = {
    248044: "<|endoftext|>",
    248045: "<|im_start|>",
    248046: "<|im_end|>",
    248053: "<|vision_start|>",
    248054: "<|vision_end|>",
    248056: "<|image_pad|>",
    248057: "<|video_pad|>",
    248068: "<think>",
    248069: "</think>",
}
"""The Qwen3.5 tokenizer's (248,320 ids) special tokens that its config.json ids and chat template name: Qwen3's
layout moved up by 96,401 (the vision ids as the kept config.json declares them; the ChatML and think ids as
public Qwen3.5 inference code uses them: eos 248044/248046, ``<think>\n\n</think>\n\n`` = 248068 271 248069
271)."""


def _tiny_config(published: dict[str, Any]) -> dict[str, Any]:
    """Returns Qwen3.5's tiny config.json: one period of the hybrid decoder (``layer_types`` up to and including
    the first full-attention layer, or ``full_attention_interval`` layers: three linear, then one full) of width
    64; full attention with 2 query heads and 1 KV head of the published ``head_dim``, so its partial rotary and
    M-RoPE sections stay as published; linear attention with 2 key and 4 value heads of 16 and the published
    convolution kernel; a 2-block vision tower of width 32. Patch, merge and temporal patch stay as published."""
    config = copy.deepcopy(published)
    text = config["text_config"]
    types = text.get("layer_types")
    period = types.index("full_attention") + 1 if types else text["full_attention_interval"]
    if types:
        text["layer_types"] = types[:period]
    linear = {"linear_num_key_heads": 2, "linear_num_value_heads": 4}
    tiny_decoder(text, heads=2, kv_heads=1, layers=period, linear_key_head_dim=16, linear_value_head_dim=16, **linear)
    config["vision_config"].update(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64)
    return config


def _vision_flops(vision: PretrainedConfig, grids: Sequence[Grid]) -> float:
    """Returns the tower's FLOPs (``vision_costs.packed_tower_flops``): Qwen3-VL's tower without DeepStack, full
    attention in every block, a two-layer MLP, one merger."""
    return packed_tower_flops(vision, grids, set(range(vision.depth)), mlp_matmuls=2, mergers=1)


SPEC = FamilySpec(
    name=FAMILY,
    model_types=("qwen3_5",),
    architectures=("Qwen3_5ForConditionalGeneration",),
    adapter=Qwen35Adapter,
    special_tokens=SPECIAL_TOKENS,
    tiny_config=_tiny_config,
    image_processors={"Qwen2VLImageProcessor": Qwen2VLImageProcessorPil},
    image_marker="<|image_pad|>",
    video_layout="timestamps",
    thinking_switch="enable_thinking",
    vision_flops=_vision_flops,
    in_llm_unsupported="in-LLM pruners score decoder layer K-1's attention row, and Qwen3.5's layers are linear "
    "attention (gated delta rule) except every fourth, so most layers have no attention row, and the in-LLM hook "
    "gives every layer one causal mask where linear layers need the padding mask",
    source="Qwen/Qwen3.5-4B and -9B config.json (model_type qwen3_5, Qwen3_5ForConditionalGeneration, every "
    "size multimodal) and chat template (generation prompt opens '<think>\\n' unless enable_thinking is "
    "false, then '<think>\\n\\n</think>\\n\\n'); transformers 5.17 models/auto/image_processing_auto.py "
    "maps qwen3_5 to Qwen2VLImageProcessor(Pil)",
)
"""Qwen3.5: thinking on by default; ``enable_thinking=false`` closes an empty block in the generation prompt."""
