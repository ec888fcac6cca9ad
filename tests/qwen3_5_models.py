"""Tiny random-weight Qwen3.5 models (the real HF class), built in code, and a fixture-style bundle.

The hybrid decoder has 4 layers: linear attention (gated delta rule with a causal convolution) at layers
0-2 and full attention at layer 3, Qwen3.5's every-fourth pattern. ``all_full=True`` builds the same model
with every layer full attention, the case where removing a token equals masking it as a key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from tiny_models import _ids, _text_ids, char_processor
from transformers import PreTrainedTokenizerFast
from transformers.models.qwen3_5 import Qwen3_5Config, Qwen3_5ForConditionalGeneration

from sparsectx.models import adapter_for
from sparsectx.models.adapter import VLMAdapter
from sparsectx.models.processor import ImageTextProcessor

PATCH = 16
"""The vision patch size of the tiny Qwen3.5 tower (as the real checkpoints)."""


def tiny_qwen3_5(
    tok: PreTrainedTokenizerFast, seed: int, layers: int = 4, all_full: bool = False
) -> Qwen3_5ForConditionalGeneration:
    """Returns a random-weight Qwen3.5: 3 full-attention vision blocks, a ``layers``-layer hybrid LLM.

    Every fourth decoder layer (index 3, 7, ...) is full attention, the rest linear attention; with
    ``all_full`` every layer is full attention.
    """
    torch.manual_seed(seed)
    types = ["full_attention" if all_full or (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)]
    config = Qwen3_5Config(
        vision_config={
            "depth": 3,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 64,
            "patch_size": PATCH,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "num_position_embeddings": 64,
        },
        text_config={
            "vocab_size": len(tok),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": layers,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "max_position_embeddings": 512,
            "linear_conv_kernel_dim": 4,
            "linear_key_head_dim": 8,
            "linear_value_head_dim": 8,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "layer_types": types,
            **_text_ids(tok),
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [2, 1, 1],
                "mrope_interleaved": True,
                "partial_rotary_factor": 0.5,
            },
        },
        **_ids(tok),
    )
    config._attn_implementation = "sdpa"
    return Qwen3_5ForConditionalGeneration(config).eval()


@dataclass
class TinyQwen35:
    """A tiny Qwen3.5 under test: its adapter, processor and patch size."""

    adapter: VLMAdapter
    processor: ImageTextProcessor
    patch: int = PATCH


def tiny_bundle(tmp: Path, seed: int = 0, all_full: bool = False) -> TinyQwen35:
    """Returns a tiny Qwen3.5 (fp32, sdpa, CPU) with its adapter and a character-level processor in ``tmp``."""
    processor = char_processor(PATCH, tmp)
    model = tiny_qwen3_5(processor.tokenizer, seed=seed, all_full=all_full)
    return TinyQwen35(adapter_for(model, signal_chunk=8), processor)
