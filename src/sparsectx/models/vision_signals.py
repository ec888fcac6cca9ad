"""Pruner signals from vision attention blocks (attention received, merged keys) and from the merger.

Two ways to get a block's signals, behind :func:`block_signals` (:func:`several_block_signals` records
several blocks of one tower pass). A vision tower routed through the grouped attention
(``model.vision_attention: grouped``) computes them inside the block's own attention call, from the same
softmax that gives the block output (``sparsectx.models.vision_attention``). HF's sdpa/flash attention
return no attention weights, so otherwise the block's input is captured with a forward hook and its
queries/keys are recomputed here, per image segment, in query chunks (never a full heads x T x T
tensor); :func:`recomputed_signals` is that recompute, also the tests' oracle for the in-pass signals.
Recipe: ``shared/specs/pruning_operators.md`` §1.5. :func:`merger_sensitivity` is ZOO-Prune's signal: the
merger's response to small random perturbations of its input, run on the tower's output after the pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from sparsectx.models.vision_attention import SignalRecord, record_signals, uses_grouped_attention
from sparsectx.visual import MergerProbe


@dataclass
class CapturedAttentionInput:
    """The arguments one vision attention module was called with during a forward pass."""

    hidden_states: torch.Tensor
    cu_seqlens: torch.Tensor
    position_embeddings: tuple[torch.Tensor, torch.Tensor]


@contextmanager
def capture_attention_input(attn: nn.Module):
    """Yields a list that receives the inputs of ``attn`` for every call made inside the context."""
    captured: list[CapturedAttentionInput] = []

    def hook(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        hidden = args[0] if args else kwargs["hidden_states"]
        cu = args[1] if len(args) > 1 else kwargs["cu_seqlens"]
        captured.append(CapturedAttentionInput(hidden.detach(), cu.detach(), kwargs["position_embeddings"]))

    handle = attn.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield captured
    finally:
        handle.remove()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotated_queries_keys(attn: nn.Module, captured: CapturedAttentionInput) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns fp32 (heads, T, d_head) queries and keys of ``attn`` after the vision 2D rotary embedding."""
    x = captured.hidden_states
    seq = x.shape[0]
    qkv = attn.qkv(x).reshape(seq, 3, attn.num_heads, -1).permute(1, 0, 2, 3).float()
    cos, sin = (t.float().unsqueeze(-2) for t in captured.position_embeddings)
    q = qkv[0] * cos + _rotate_half(qkv[0]) * sin
    k = qkv[1] * cos + _rotate_half(qkv[1]) * sin
    return q.transpose(0, 1), k.transpose(0, 1)


def attention_received(
    q: torch.Tensor, k: torch.Tensor, cu_seqlens: torch.Tensor, scaling: float, chunk: int
) -> torch.Tensor:
    """Returns (T,) fp32 attention each patch receives: softmax over its segment, mean over heads, sum over queries.

    Args:
        q, k: (heads, T, d_head) fp32 rotated queries and keys.
        cu_seqlens: (S + 1,) segment boundaries (one segment per image); attention never crosses them.
        scaling: the block's softmax scale (d_head ** -0.5).
        chunk: queries processed at a time, bounding memory at heads x chunk x segment.
    """
    received = torch.zeros(q.shape[1], dtype=torch.float32, device=q.device)
    bounds = cu_seqlens.tolist()
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        keys = k[:, start:end]
        for c0 in range(start, end, chunk):
            c1 = min(c0 + chunk, end)
            probs = torch.softmax(q[:, c0:c1] @ keys.transpose(1, 2) * scaling, dim=-1)
            received[start:end] += probs.mean(dim=0).sum(dim=0)
    return received


def merge_unit_mean(values: torch.Tensor, unit: int) -> torch.Tensor:
    """Returns per-merged-token means of ``values`` (T, ...) over groups of ``unit`` consecutive patches."""
    return values.reshape(values.shape[0] // unit, unit, *values.shape[1:]).mean(dim=1)


def merge_signals(
    received: torch.Tensor, keys: torch.Tensor, unit: int, to_raster: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (M,) attention received and (M, d_head) keys per merged token, in raster order.

    Args:
        received: (T,) per-patch attention received, in the block's token order.
        keys: (T, d_head) per-patch head-mean keys, in the same order.
        unit: patches per merged token (spatial_merge_size ** 2).
        to_raster: (M,) permutation from the block's token order to raster order (Qwen2.5-VL's
            argsort(window_index)); None when the block already runs in raster order.
    """
    received, keys = merge_unit_mean(received, unit), merge_unit_mean(keys, unit)
    if to_raster is not None:
        received, keys = received[to_raster], keys[to_raster]
    return received, keys


def recomputed_signals(
    attn: nn.Module, captured: CapturedAttentionInput, chunk: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (T,) attention received and (T, d_head) head-mean keys per patch, recomputed from ``attn``'s input.

    Args:
        attn: the vision attention module whose input was captured (a full-attention block).
        captured: its captured input.
        chunk: query chunk size for the attention recompute.
    """
    q, k = rotated_queries_keys(attn, captured)
    return attention_received(q, k, captured.cu_seqlens, attn.scaling, chunk), k.mean(dim=0)


@contextmanager
def block_signals(attn: nn.Module, chunk: int) -> Iterator[SignalRecord]:
    """Yields a ``SignalRecord`` holding, once the context exits, the signals of ``attn``'s last call in it.

    In the same pass when ``attn`` runs the grouped attention; otherwise by recomputing the block's
    attention from its captured input after the forward (under no_grad). ``chunk`` bounds the query
    rows whose softmax is held at once, either way.
    """
    if uses_grouped_attention(attn):
        with record_signals(attn, chunk) as record:
            yield record
        return
    record = SignalRecord(chunk)
    with capture_attention_input(attn) as captured:
        yield record
    with torch.no_grad():
        record.received, record.keys = recomputed_signals(attn, captured[-1], chunk)


@contextmanager
def several_block_signals(attns: Sequence[nn.Module], chunk: int) -> Iterator[list[SignalRecord]]:
    """Yields one ``SignalRecord`` per module of ``attns`` (filled on exit), all from the same forward pass.

    A module named twice is recorded once and its record shared, so the object block may coincide with the
    last full-attention block (tiny towers).
    """
    unique = list(dict.fromkeys(attns))
    with ExitStack() as stack:
        records = {attn: stack.enter_context(block_signals(attn, chunk)) for attn in unique}
        yield [records[attn] for attn in attns]


def probe_directions(probe: MergerProbe, width: int) -> torch.Tensor:
    """Returns (m, width) fp32 unit directions drawn from a CPU generator seeded with ``probe.seed``.

    The same m directions perturb every merged token of every image (as the authors' code shares u_j over
    tokens), and a token's directions never depend on the batch it is encoded in.
    """
    gen = torch.Generator().manual_seed(probe.seed)
    u = torch.randn(probe.probes, width, generator=gen, dtype=torch.float64)
    return (u / u.norm(dim=-1, keepdim=True)).float()


def merger_sensitivity(
    merger: nn.Module, patches: torch.Tensor, unit: int, probe: MergerProbe, chunk: int
) -> torch.Tensor:
    """Returns (M,) fp32 s_i = mean_j ||f(x_i + h u_j) - f(x_i - h u_j)|| / (2h) per merged token.

    ZOO-Prune's zeroth-order sensitivity (Kim et al., CVPR 2026, AIM-SKKU/ZOO-Prune llava_arch.py): x_i is
    the merger's input for merged token i, its ``unit`` patches concatenated (unit * C values), u_j the
    directions of :func:`probe_directions` and f the merger, run in fp32 on upcast weights (the step h is
    far below bf16 resolution). Order follows ``patches``.

    Args:
        merger: the tower's patch merger, mapping (M * unit, C) patches to (M, D) tokens.
        patches: (M * unit, C) merger input (the tower's last hidden state).
        unit: patches per merged token.
        probe: m directions, step h and their seed.
        chunk: merged-token rows per merger call (at least one probe's M rows), bounding memory.
    """
    width = unit * patches.shape[1]
    x = patches.detach().float().reshape(-1, width)
    u = probe_directions(probe, width).to(x.device)
    weights = {name: t.float() for name, t in (*merger.named_parameters(), *merger.named_buffers())}
    per_call = max(1, chunk // x.shape[0])
    total = torch.zeros(x.shape[0], dtype=torch.float32, device=x.device)
    with torch.no_grad():
        for j0 in range(0, probe.probes, per_call):
            shift = probe.step * u[j0 : j0 + per_call, None, :]  # (c, 1, width)
            outs = [
                torch.func.functional_call(merger, weights, ((x + sign * shift).reshape(-1, patches.shape[1]),))
                for sign in (1.0, -1.0)
            ]
            delta = (outs[0] - outs[1]).reshape(shift.shape[0], x.shape[0], -1)
            total += (delta.norm(dim=-1) / (2.0 * probe.step)).sum(dim=0)
    return total / probe.probes
