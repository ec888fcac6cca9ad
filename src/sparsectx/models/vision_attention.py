"""Packed vision attention with one ``scaled_dot_product_attention`` call per distinct segment length.

HF's Qwen2.5-VL / Qwen3-VL vision attention, under sdpa or eager, splits the packed sequence at
``cu_seqlens`` and calls attention once per window or image in a Python loop: about 2,600 tiny calls per
windowed block for 32 images of 1296 merged tokens. Segments of one length fold into a batch dimension,
so this function gathers the segments of each distinct length into a (count, heads, length, dim) batch,
runs one sdpa call per length and scatters the outputs back: the same math, a handful of calls per block.
The grouping costs one host sync per ``cu_seqlens`` tensor (none when every segment has the same length)
and is cached on that tensor's identity, so the blocks of one forward that share it reuse it.

The model reaches this function through the varlen ("flash") path of its attention module, the only path
that hands over ``cu_seq_lens_q``. Inference picks it with ``model.vision_attention: grouped`` (``hf``
keeps HF's loop); pretraining with ``train.batched_vision_attention``. A call can also return the
attention each patch receives, the pruner signal, from the same softmax (:func:`record_signals`).
Saved configs carry no reference to it (``_attn_implementation`` is not serialised).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AttentionInterface

# "flash" in the name routes the vision module to its cu_seqlens code path; nothing else is flash here.
NAME = "sparsectx_grouped_flash"


@dataclass(frozen=True)
class SegmentGroups:
    """Packed segments grouped by length, in order of first appearance.

    Attributes:
        lengths: the distinct segment lengths, one per group.
        counts: the number of segments of each group.
        order: (T,) int64 token permutation that puts group 0's segments first, then group 1's ...;
            None when the tokens already are in that order.
        restore: (T,) int64 inverse of ``order``; None with it.
    """

    lengths: tuple[int, ...]
    counts: tuple[int, ...]
    order: torch.Tensor | None
    restore: torch.Tensor | None


@dataclass
class SignalRecord:
    """The pruner signals one recorded attention call leaves behind (filled by the call).

    Attributes:
        chunk: query rows whose softmax is held at a time, bounding memory at heads x chunk x segment.
        received: (T,) fp32 attention each patch receives (mean over heads, summed over its segment's
            queries), in the block's token order.
        keys: (T, d_head) fp32 rotated keys averaged over heads, in the block's token order.
    """

    chunk: int
    received: torch.Tensor | None = None
    keys: torch.Tensor | None = None


_GROUPS: dict[int, tuple[weakref.ref, SegmentGroups]] = {}
_RECORDS: dict[nn.Module, SignalRecord] = {}


def group_segments(cu_seqlens: torch.Tensor, total: int, max_length: int | None) -> SegmentGroups:
    """Returns the segments delimited by ``cu_seqlens`` grouped by length, index tensors on its device.

    Args:
        cu_seqlens: (S + 1,) int segment boundaries of a packed sequence of ``total`` tokens.
        total: T, the packed sequence length.
        max_length: the longest segment when the caller knows it: equal segments then need no host sync.
    """
    count = cu_seqlens.numel() - 1
    if max_length is not None and max_length * count == total:
        return SegmentGroups((max_length,), (count,), None, None)
    bounds = cu_seqlens.tolist()
    starts: dict[int, list[int]] = {}
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        if end > start:
            starts.setdefault(end - start, []).append(start)
    order = torch.cat([(torch.tensor(s)[:, None] + torch.arange(length)).flatten() for length, s in starts.items()])
    lengths, counts = tuple(starts), tuple(len(s) for s in starts.values())
    if torch.equal(order, torch.arange(total)):
        return SegmentGroups(lengths, counts, None, None)
    restore = torch.empty_like(order)
    restore[order] = torch.arange(total)
    return SegmentGroups(lengths, counts, order.to(cu_seqlens.device), restore.to(cu_seqlens.device))


def cached_groups(cu_seqlens: torch.Tensor, total: int, max_length: int | None) -> SegmentGroups:
    """Returns :func:`group_segments` of ``cu_seqlens``, computed once per tensor object while it lives."""
    key = id(cu_seqlens)
    entry = _GROUPS.get(key)
    if entry is not None and entry[0]() is cu_seqlens:
        return entry[1]

    def forget(ref: weakref.ref) -> None:
        if _GROUPS.get(key, (None,))[0] is ref:
            del _GROUPS[key]

    groups = group_segments(cu_seqlens, total, max_length)
    _GROUPS[key] = (weakref.ref(cu_seqlens, forget), groups)
    return groups


def attention_with_received(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float, chunk: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns softmax attention (count, heads, L, d) and the fp32 mass each key receives, (count, L).

    The explicit-softmax form of sdpa for a batch of equal-length segments, in HF's eager convention: scores
    q k^T in the inputs' dtype (fp32 accumulation), softmax(scores * scaling) in fp32 (or wider), output probs @ v with
    the probabilities cast back to the inputs' dtype (bf16 scores run on tensor cores, fp32 ones ~10x
    slower); the received mass of key j is the mean over heads
    of the sum over queries of its probability (so each segment's masses sum to L). At most ``chunk``
    query rows (whole segments when L <= chunk) are held at once: heads x max(chunk, L) x L floats.

    Args:
        q, k, v: (count, heads, L, d) rotated queries, keys and values of ``count`` segments.
        scaling: the softmax scale (d ** -0.5 for the Qwen vision blocks).
        chunk: query rows per softmax step.
    """
    count, _, length, _ = q.shape
    per_step = max(1, chunk // length)
    rows = min(length, chunk)
    wide = torch.promote_types(q.dtype, torch.float32)
    outputs, received = [], []
    for s0 in range(0, count, per_step):
        keys, values = k[s0 : s0 + per_step], v[s0 : s0 + per_step]
        parts, mass = [], 0.0
        for r0 in range(0, length, rows):
            logits = q[s0 : s0 + per_step, :, r0 : r0 + rows] @ keys.transpose(-1, -2)
            probs = torch.softmax(logits * scaling, dim=-1, dtype=wide)  # (segments, heads, rows, L)
            parts.append(probs.to(v.dtype) @ values)
            mass = mass + probs.detach().mean(dim=1).sum(dim=1).float()
        outputs.append(torch.cat(parts, dim=2))
        received.append(mass)
    return torch.cat(outputs), torch.cat(received)


def grouped_segment_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    cu_seq_lens_q: torch.Tensor | None = None,
    max_length_q: int | None = None,
    is_causal: bool = False,
    **_: object,
) -> tuple[torch.Tensor, None]:
    """Returns bidirectional attention within each packed segment, as (1, T, heads, dim), and no weights.

    ``query``/``key``/``value`` are (1, heads, T, dim) with segments delimited by ``cu_seq_lens_q``. One
    sdpa call per distinct segment length; when ``module`` is being recorded (:func:`record_signals`), an
    explicit chunked softmax instead, which also fills the record.
    """
    if attention_mask is not None or cu_seq_lens_q is None or query.shape[0] != 1 or is_causal:
        raise ValueError(f"{NAME} serves packed bidirectional vision attention only (batch 1, cu_seqlens, no mask)")
    _, heads, total, dim = query.shape
    record = _RECORDS.get(module)
    if record is not None and dropout > 0:
        raise ValueError(f"{NAME}: recording pruner signals needs attention dropout 0, got {dropout}")
    scale = dim**-0.5 if scaling is None else scaling
    groups = cached_groups(cu_seq_lens_q, total, max_length_q)
    tokens = [t[0].transpose(0, 1) for t in (query, key, value)]  # (T, heads, dim)
    if groups.order is not None:
        tokens = [t.index_select(0, groups.order) for t in tokens]
    outputs, received, offset = [], [], 0
    for length, count in zip(groups.lengths, groups.counts, strict=True):
        span = slice(offset, offset + count * length)
        q, k, v = (t[span].reshape(count, length, heads, dim).transpose(1, 2) for t in tokens)  # (count, heads, L, dim)
        if record is None:
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=dropout, scale=scale)
        else:
            out, mass = attention_with_received(q, k, v, scale, record.chunk)
            received.append(mass.flatten())
        outputs.append(out.transpose(1, 2).reshape(count * length, heads, dim))
        offset += count * length
    out = torch.cat(outputs) if len(outputs) > 1 else outputs[0]
    if record is not None:
        mass = torch.cat(received)
        record.received = mass if groups.restore is None else mass[groups.restore]
        record.keys = key[0].detach().float().mean(dim=0)
    if groups.restore is not None:
        out = out.index_select(0, groups.restore)
    return out.unsqueeze(0), None


def use_grouped_vision_attention(model: nn.Module) -> None:
    """Routes ``model``'s vision tower (a Qwen2.5-VL / Qwen3-VL model) through :func:`grouped_segment_attention`."""
    # Never traced by torch.compile (``model.compile_blocks``): its segment grouping is cached on the host.
    AttentionInterface.register(NAME, torch.compiler.disable(grouped_segment_attention))
    model.set_attn_implementation({"vision_config": NAME})


def uses_grouped_attention(attn: nn.Module) -> bool:
    """Returns whether the vision attention module ``attn`` runs :func:`grouped_segment_attention`."""
    return attn.config._attn_implementation == NAME


@contextmanager
def record_signals(attn: nn.Module, chunk: int) -> Iterator[SignalRecord]:
    """Yields a ``SignalRecord`` that ``attn``'s calls inside the context fill (the last call wins).

    Only for a module routed through this function (:func:`uses_grouped_attention`); its output inside
    the context comes from :func:`attention_with_received` rather than sdpa (the same math).
    """
    if not uses_grouped_attention(attn):
        raise ValueError(f"record_signals needs a vision tower routed through {NAME} (use_grouped_vision_attention)")
    record = SignalRecord(chunk)
    _RECORDS[attn] = record
    try:
        yield record
    finally:
        del _RECORDS[attn]
