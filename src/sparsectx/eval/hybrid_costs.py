"""Analytic costs of a hybrid decoder's layers (Qwen3.5): which layers are full attention, and what a
linear-attention layer costs per token and holds in its cache.

A Qwen3.5 linear-attention layer (gated delta rule) per token: projections ``in_proj_qkv`` (D -> C, C =
2 H_k d_k + H_v d_v), ``in_proj_z`` (D -> H_v d_v), ``in_proj_a`` and ``in_proj_b`` (D -> H_v each) and
``out_proj`` (H_v d_v -> D); the causal depthwise convolution over C channels with kernel K (``2 C K``); and
the recurrent update in its per-token form, three (d_k x d_v) products per value head: reading the state
at the key, writing the corrected outer product, reading it at the query (``6 H_v d_k d_v``; the fused
kernels compute this form, HF's chunked torch fallback reorganises it into chunk matmuls). Its cache holds
the last K convolution inputs (C x K, the model's dtype) and the fp32 (H_v, d_k, d_v) state whatever the
prompt length. Qwen3.5's full-attention layers gate their output by a second half of ``q_proj``
(``QUERY_GATE``), so their query projection is twice as wide.
"""

from __future__ import annotations

from transformers import PretrainedConfig

FULL = "full_attention"
LINEAR = "linear_attention"
QUERY_GATE = {"qwen3_5_text": 2}
"""Text ``model_type`` -> width factor of ``q_proj`` (query plus an output gate of the same width)."""
STATE_BYTES = 4
"""Bytes per element of the recurrent state: HF keeps it in fp32 in every model dtype."""


def layer_kinds(text: PretrainedConfig) -> list[str]:
    """Returns each decoder layer's kind (``full_attention`` or ``linear_attention``) of a text config."""
    kinds = getattr(text, "layer_types", None) or [FULL] * text.num_hidden_layers
    unknown = sorted(set(kinds) - {FULL, LINEAR})
    if unknown:
        raise KeyError(f"no cost formulas for decoder layer types {unknown}; known: {FULL}, {LINEAR}")
    return list(kinds)


def query_gate(text: PretrainedConfig) -> int:
    """Returns the width factor of a full-attention layer's ``q_proj`` (2 where it carries an output gate)."""
    return QUERY_GATE.get(getattr(text, "model_type", None), 1)


def _linear_dims(text: PretrainedConfig) -> tuple[int, int, int, int, int]:
    """Returns (C, K, H_v, d_k, d_v) of a linear-attention layer."""
    hk, dk = text.linear_num_key_heads, text.linear_key_head_dim
    hv, dv = text.linear_num_value_heads, text.linear_value_head_dim
    return 2 * hk * dk + hv * dv, text.linear_conv_kernel_dim, hv, dk, dv


def linear_token_flops(text: PretrainedConfig) -> dict[str, float]:
    """Returns one token's FLOPs in one linear-attention layer: ``linear_proj``, ``linear_conv``, ``linear_core``."""
    channels, kernel, hv, dk, dv = _linear_dims(text)
    d = text.hidden_size
    return {
        "linear_proj": float(2 * d * (channels + hv * dv + 2 * hv) + 2 * hv * dv * d),
        "linear_conv": float(2 * channels * kernel),
        "linear_core": float(6 * hv * dk * dv),
    }


def linear_state_bytes(text: PretrainedConfig, bytes_per_element: int) -> int:
    """Returns the cache bytes one linear-attention layer holds per sequence (convolution window + state)."""
    channels, kernel, hv, dk, dv = _linear_dims(text)
    return channels * kernel * bytes_per_element + hv * dk * dv * STATE_BYTES
