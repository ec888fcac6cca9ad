"""Per-position divergences between a student and a teacher next-token distribution.

Direction is in every name (style convention 15):

- ``forward_kl`` = KL(q‖p) = E_{v~q}[log q_v - log p_v], the expectation over the **teacher** q. This is the
  SCOPD loss (SCOPD paper Eq. 4, seed 004) and EPIC's KD term.
- ``reverse_kl`` = KL(p‖q) = E_{v~p}[log p_v - log q_v], the expectation over the **student** p.
- ``jsd`` = generalized Jensen-Shannon divergence in TRL/GKD's convention (GKD, arXiv 2306.13649, Eq. 1):
  mixture M_β = β·q + (1-β)·p and JSD_β = β·KL(q‖M_β) + (1-β)·KL(p‖M_β), both expectations over the
  named distribution. Endpoints are special-cased exactly as TRL's ``GKDTrainer.generalized_jsd_loss``:
  β = 0 returns ``forward_kl`` (teacher-weighted), β = 1 returns ``reverse_kl`` (student-weighted). The raw
  mixture formula tends to 0 at both ends, so the value jumps at β ∈ {0, 1}: never use a tiny β as a stand-in
  for forward KL. At β = 0.5 it is the symmetric JSD bounded by ln 2 (LT-OPD's objective, and SCOPD+'s
  sensitivity, SCOPD Eq. 7).

Where this coincides with TRL: on the full vocabulary with the same temperature, our per-position ``jsd`` is
TRL's per-token value (TRL sums ``F.kl_div(..., reduction="none")`` over V), and TRL's
``reduction="batchmean"`` with labels equals ``reduction.global_token_mean`` with the token count of that
one batch. TRL has no top-K path in GKD and normalizes per micro-batch, so those two differ by design.

Every public function takes keyword-only tensors (so student and teacher cannot be swapped by position),
computes only at positions where ``mask`` is True, and processes those positions ``chunk_size`` rows at a
time: each chunk is upcast to fp32, turned into log-probabilities by subtracting ``logsumexp``, and wrapped in
activation checkpointing, so the fp32 full-vocabulary intermediates of the whole batch never exist at once
(training-methods spec §1.6). Teacher logits are always detached.

Top-K mode (spec §1.5, LT-OPD seed App. B): per position the support is the union of the teacher's top-K, the
student's top-K (both from detached logits) and the sampled token, deduplicated; the probabilities gathered
on it are the TRUE full-vocabulary ones (not renormalized), and one extra tail category carries the remaining
mass. The tail log-mass is the ``logsumexp`` of the logits *outside* the support minus the normalizer, which
is exact even when the tail is 1e-12 (no ``1 - sum`` cancellation, so no clamp is needed).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Literal, Protocol

import torch
from torch.utils.checkpoint import checkpoint

from sparsectx.registry import Registry

Kind = Literal["forward_kl", "reverse_kl", "jsd"]


class Divergence(Protocol):
    """Signature every registered divergence implements; extra keyword arguments (``beta``) come from YAML."""

    def __call__(
        self,
        *,
        student_logits: torch.Tensor,
        teacher_logits: torch.Tensor,
        mask: torch.Tensor,
        sampled_ids: torch.Tensor | None,
        top_k: int | None,
        chunk_size: int,
        temperature: float,
        **params: float,
    ) -> torch.Tensor:
        """Returns the (B, T) fp32 per-position divergence, 0 where ``mask`` is False."""
        ...


DIVERGENCES: Registry[Divergence] = Registry("divergence")


def _kl_rows(la: torch.Tensor, lb: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """Returns KL(a‖b) = Σ_v a_v (log a_v - log b_v) per row of the (n, S) sanitized log-probs."""
    weight = la.exp() if valid is None else la.exp() * valid
    return (weight * (la - lb)).sum(-1)


def _divergence_rows(
    lq: torch.Tensor, lp: torch.Tensor, valid: torch.Tensor | None, kind: Kind, beta: float
) -> torch.Tensor:
    """Returns the (n,) divergence between teacher log-probs ``lq`` and student log-probs ``lp``, both (n, S).

    ``valid`` (n, S) bool marks real categories; invalid slots must already hold finite values (0).
    """
    if kind == "forward_kl" or (kind == "jsd" and beta == 0.0):
        return _kl_rows(lq, lp, valid)
    if kind == "reverse_kl" or (kind == "jsd" and beta == 1.0):
        return _kl_rows(lp, lq, valid)
    # log M_β = logsumexp(log q + log β, log p + log(1-β)); never exp-then-log (spec §1.4).
    log_mix = torch.logsumexp(torch.stack([lq + math.log(beta), lp + math.log1p(-beta)]), dim=0)
    return beta * _kl_rows(lq, log_mix, valid) + (1.0 - beta) * _kl_rows(lp, log_mix, valid)


def topk_support_logprobs(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    sampled_ids: torch.Tensor | None,
    top_k: int,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Returns (support_ids, student_ext, teacher_ext, valid_ext): log-probs on top-K ∪ sampled plus a tail.

    Support = unique(topK(teacher) ∪ topK(student) ∪ {sampled}), sorted by token id, padded with duplicates
    that ``valid_ext`` marks False. Column S (the last) is the tail bucket log(1 - Σ_support prob), computed
    as logsumexp over the complement; it is marked invalid (and holds 0) when the support covers the whole
    vocabulary. Invalid slots hold 0 so that downstream arithmetic stays finite.

    Args:
        student_logits: (n, V) any float dtype; gradients flow through the gathered values and the tail.
        teacher_logits: (n, V) any float dtype; treated as constant (detach before calling).
        sampled_ids: (n,) int64 sampled token y_t per row, or None to use the two top-K sets only.
        top_k: K >= 1; K >= V gives the full vocabulary.
        temperature: T_loss > 0; logits are divided by it before normalizing.

    Returns:
        support_ids (n, S) int64; student_ext and teacher_ext (n, S+1) fp32 true log-probs; valid_ext (n, S+1)
        bool.
    """
    zs = student_logits.float() / temperature
    zt = teacher_logits.float() / temperature
    vocab = zs.shape[-1]
    k = min(top_k, vocab)
    parts = [zt.topk(k, dim=-1).indices, zs.detach().topk(k, dim=-1).indices]
    if sampled_ids is not None:
        parts.append(sampled_ids.reshape(-1, 1).long())
    support, _ = torch.cat(parts, dim=-1).sort(dim=-1)
    valid = torch.ones_like(support, dtype=torch.bool)
    valid[:, 1:] = support[:, 1:] != support[:, :-1]  # O(S log S) dedup: sorted, drop repeats

    in_support = torch.zeros_like(zs, dtype=torch.bool).scatter_(1, support, True)
    has_tail = ~in_support.all(dim=-1, keepdim=True)  # (n, 1)
    # Entries hidden from the complement sum; rows without a tail hide nothing (their slot is invalid).
    hidden = in_support & has_tail

    def extend(z: torch.Tensor) -> torch.Tensor:
        log_norm = torch.logsumexp(z, dim=-1, keepdim=True)
        on_support = z.gather(1, support) - log_norm
        tail = torch.logsumexp(z.masked_fill(hidden, float("-inf")), dim=-1, keepdim=True) - log_norm
        return torch.cat([on_support, tail], dim=-1)

    valid_ext = torch.cat([valid, has_tail], dim=-1)
    student_ext = torch.where(valid_ext, extend(zs), 0.0)
    teacher_ext = torch.where(valid_ext, extend(zt), 0.0)
    return support, student_ext, teacher_ext, valid_ext


def _chunk(
    zs: torch.Tensor,
    zt: torch.Tensor,
    sampled: torch.Tensor | None,
    *,
    kind: Kind,
    beta: float,
    top_k: int | None,
    temperature: float,
) -> torch.Tensor:
    """Returns the (n,) clamped divergence for one chunk of rows; see ``_per_position``."""
    if top_k is None:
        lp = torch.log_softmax(zs.float() / temperature, dim=-1)
        lq = torch.log_softmax(zt.float() / temperature, dim=-1)
        valid = None
    else:
        _, lp, lq, valid = topk_support_logprobs(zs, zt, sampled, top_k, temperature)
    # Tiny negative values are fp noise; clamping keeps the logged per-token loss non-negative (spec §1.4).
    return _divergence_rows(lq, lp, valid, kind, beta).clamp_min(0.0)


def _check_args(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor,
    sampled_ids: torch.Tensor | None,
    top_k: int | None,
    chunk_size: int,
    temperature: float,
) -> None:
    if student_logits.dim() != 3 or student_logits.shape != teacher_logits.shape:
        raise ValueError(
            f"student_logits {tuple(student_logits.shape)} and teacher_logits {tuple(teacher_logits.shape)} "
            "must both be (B, T, V) and equal; slice both to the response positions first"
        )
    if mask.shape != student_logits.shape[:2] or mask.dtype != torch.bool:
        raise ValueError(f"mask must be a (B, T) bool tensor, got {mask.dtype} {tuple(mask.shape)}")
    if sampled_ids is not None and sampled_ids.shape != mask.shape:
        raise ValueError(f"sampled_ids must be (B, T) like mask, got {tuple(sampled_ids.shape)}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k={top_k!r} must be an int >= 1, or null for the full vocabulary")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size={chunk_size!r} must be an int >= 1 (positions per fp32 chunk)")
    if not temperature > 0:
        raise ValueError(f"temperature={temperature!r} must be > 0 (the loss temperature; SCOPD and TRL GKD use 1.0)")


def _per_position(
    *,
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor,
    sampled_ids: torch.Tensor | None,
    kind: Kind,
    beta: float,
    top_k: int | None,
    chunk_size: int,
    temperature: float,
) -> torch.Tensor:
    """Returns the (B, T) fp32 divergence, computed chunk by chunk at the masked-in positions only."""
    _check_args(student_logits, teacher_logits, mask, sampled_ids, top_k, chunk_size, temperature)
    batch, steps, vocab = student_logits.shape
    rows = mask.reshape(-1).nonzero().squeeze(1)  # (N,)
    flat_s = student_logits.reshape(batch * steps, vocab)
    flat_t = teacher_logits.detach().reshape(batch * steps, vocab)
    if rows.numel() < batch * steps:  # one gather in the input dtype (bf16 in training), never an fp32 copy
        flat_s, flat_t = flat_s.index_select(0, rows), flat_t.index_select(0, rows)
    sampled = None if sampled_ids is None else sampled_ids.reshape(-1)[rows]

    fn = partial(_chunk, kind=kind, beta=beta, top_k=top_k, temperature=temperature)
    recompute = torch.is_grad_enabled() and flat_s.requires_grad
    s_chunks = flat_s.split(chunk_size)  # split (not slicing) so backward concatenates once
    t_chunks = flat_t.split(chunk_size)
    y_chunks = [None] * len(s_chunks) if sampled is None else list(sampled.split(chunk_size))
    values = []
    for zs, zt, ys in zip(s_chunks, t_chunks, y_chunks, strict=True):
        # Checkpointing drops the chunk's fp32 intermediates after forward and recomputes them in backward.
        values.append(checkpoint(fn, zs, zt, ys, use_reentrant=False) if recompute else fn(zs, zt, ys))
    # An empty selection still returns a tensor attached to the student logits (a zero-gradient path).
    vals = torch.cat(values) if values else flat_s[:0].float().sum(-1)
    out = torch.zeros(batch * steps, dtype=torch.float32, device=student_logits.device)
    return out.index_put((rows,), vals).view(batch, steps)


@DIVERGENCES.register("forward_kl")
def forward_kl(
    *,
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor,
    sampled_ids: torch.Tensor | None,
    top_k: int | None,
    chunk_size: int,
    temperature: float,
) -> torch.Tensor:
    """Returns (B, T) fp32 forward KL(q‖p) = Σ_v q_v (log q_v - log p_v), expectation over the TEACHER q.

    SCOPD paper Eq. 4 / SCOPD+ Eq. 9 (per position, before reduction). Mean-covering. Equals ``jsd`` at β = 0.

    Args:
        student_logits: (B, T, V) any float dtype, the student's logits at response positions (grad flows).
        teacher_logits: (B, T, V) same shape; detached here, so the teacher never receives a gradient.
        mask: (B, T) bool; positions to compute. Others are skipped entirely and return 0.
        sampled_ids: (B, T) int64 sampled tokens y_t (added to the top-K support), or None. Ignored when
            ``top_k`` is None.
        top_k: K for the top-K ∪ sampled support with one tail bucket, or None for the full vocabulary.
        chunk_size: positions per fp32 chunk (32-64 on a 152k vocabulary).
        temperature: loss temperature T_loss > 0 (independent of the sampling temperature; no T² factor).
    """
    return _per_position(
        student_logits=student_logits,
        teacher_logits=teacher_logits,
        mask=mask,
        sampled_ids=sampled_ids,
        kind="forward_kl",
        beta=0.0,
        top_k=top_k,
        chunk_size=chunk_size,
        temperature=temperature,
    )


@DIVERGENCES.register("reverse_kl")
def reverse_kl(
    *,
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor,
    sampled_ids: torch.Tensor | None,
    top_k: int | None,
    chunk_size: int,
    temperature: float,
) -> torch.Tensor:
    """Returns (B, T) fp32 reverse KL(p‖q) = Σ_v p_v (log p_v - log q_v), expectation over the STUDENT p.

    Mode-seeking (LT-OPD App. G ablation; Thinking Machines OPD). Equals ``jsd`` at β = 1.

    Args:
        student_logits: (B, T, V) any float dtype, the student's logits at response positions (grad flows).
        teacher_logits: (B, T, V) same shape; detached here, so the teacher never receives a gradient.
        mask: (B, T) bool; positions to compute. Others are skipped entirely and return 0.
        sampled_ids: (B, T) int64 sampled tokens y_t (added to the top-K support), or None. Ignored when
            ``top_k`` is None.
        top_k: K for the top-K ∪ sampled support with one tail bucket, or None for the full vocabulary.
        chunk_size: positions per fp32 chunk (32-64 on a 152k vocabulary).
        temperature: loss temperature T_loss > 0 (independent of the sampling temperature; no T² factor).
    """
    return _per_position(
        student_logits=student_logits,
        teacher_logits=teacher_logits,
        mask=mask,
        sampled_ids=sampled_ids,
        kind="reverse_kl",
        beta=1.0,
        top_k=top_k,
        chunk_size=chunk_size,
        temperature=temperature,
    )


@DIVERGENCES.register("jsd")
def jsd(
    *,
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor,
    sampled_ids: torch.Tensor | None,
    beta: float,
    top_k: int | None,
    chunk_size: int,
    temperature: float,
) -> torch.Tensor:
    """Returns (B, T) fp32 generalized JSD_β = β·KL(q‖M) + (1-β)·KL(p‖M), M = β·q + (1-β)·p (TRL/GKD Eq. 1).

    q = teacher, p = student; KL(q‖M) is an expectation over q and KL(p‖M) over p. Endpoints (TRL's
    convention): β = 0 → ``forward_kl`` KL(q‖p); β = 1 → ``reverse_kl`` KL(p‖q). β = 0.5 is symmetric and
    ≤ ln 2 (LT-OPD seed 000 App. B; SCOPD Eq. 7 when both arguments are student views).

    Args:
        student_logits: (B, T, V) any float dtype, the student's logits at response positions (grad flows).
        teacher_logits: (B, T, V) same shape; detached here, so the teacher never receives a gradient.
        mask: (B, T) bool; positions to compute. Others are skipped entirely and return 0.
        sampled_ids: (B, T) int64 sampled tokens y_t (added to the top-K support), or None. Ignored when
            ``top_k`` is None.
        beta: β in [0, 1], the teacher weight in the mixture M.
        top_k: K for the top-K ∪ sampled support with one tail bucket, or None for the full vocabulary.
        chunk_size: positions per fp32 chunk (32-64 on a 152k vocabulary).
        temperature: loss temperature T_loss > 0 (independent of the sampling temperature; no T² factor).
    """
    if isinstance(beta, bool) or not 0.0 <= float(beta) <= 1.0:
        raise ValueError(f"beta={beta!r} must lie in [0, 1] (0 = forward KL(teacher‖student), 1 = reverse KL)")
    return _per_position(
        student_logits=student_logits,
        teacher_logits=teacher_logits,
        mask=mask,
        sampled_ids=sampled_ids,
        kind="jsd",
        beta=float(beta),
        top_k=top_k,
        chunk_size=chunk_size,
        temperature=temperature,
    )
