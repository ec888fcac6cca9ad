"""One batched attention call for the vision tower when every packed segment has the same length.

HF's Qwen2.5-VL vision attention, under sdpa, splits the packed sequence at ``cu_seqlens`` and calls
attention once per image (or window) in a Python loop: at batch 128 that is 128 tiny kernels per block,
forward and backward, and it dominates a tiny model's pretraining step. Pretraining images all share one
size, so the segments are equal and fold into a batch dimension. The model reaches this function
through the varlen ("flash") path of its attention module, which hands over ``cu_seq_lens_q``; unequal
segments fall back to the same per-segment loop HF runs. Used for pretraining only: released weights
carry no reference to it (``tests/pretrain/test_vision_attention.py`` checks equality with sdpa).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface

# "flash" in the name routes the vision module to its cu_seqlens code path; nothing else is flash here.
NAME = "sparsectx_uniform_flash"


def uniform_segment_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    cu_seq_lens_q: torch.Tensor | None = None,
    max_length_q: int | None = None,
    **_: object,
) -> tuple[torch.Tensor, None]:
    """Returns bidirectional attention within each packed segment, as (1, seq, heads, dim), and no weights.

    ``query``/``key``/``value`` are (1, heads, seq, dim) with segments delimited by ``cu_seq_lens_q``.
    """
    if attention_mask is not None or cu_seq_lens_q is None or query.shape[0] != 1:
        raise ValueError(f"{NAME} serves packed bidirectional vision attention only (batch 1, cu_seqlens, no mask)")
    _, heads, seq, dim = query.shape
    count = cu_seq_lens_q.numel() - 1
    if max_length_q is not None and max_length_q * count == seq:
        fold = lambda t: t.reshape(heads, count, seq // count, dim).transpose(0, 1)  # noqa: E731
        out = torch.nn.functional.scaled_dot_product_attention(
            fold(query), fold(key), fold(value), dropout_p=dropout, scale=scaling
        )  # (count, heads, length, dim)
        return out.transpose(1, 2).reshape(1, seq, heads, dim), None
    lengths = (cu_seq_lens_q[1:] - cu_seq_lens_q[:-1]).tolist()
    parts = [
        torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=dropout, scale=scaling)
        for q, k, v in zip(*(t.split(lengths, dim=2) for t in (query, key, value)), strict=True)
    ]
    return torch.cat(parts, dim=2).transpose(1, 2), None


def use_uniform_vision_attention(model: torch.nn.Module) -> None:
    """Routes ``model``'s vision tower (a Qwen2.5-VL-class model) through :func:`uniform_segment_attention`."""
    AttentionInterface.register(NAME, uniform_segment_attention)
    model.set_attn_implementation({"vision_config": NAME})
