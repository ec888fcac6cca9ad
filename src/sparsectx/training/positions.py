"""Position selectors: which response positions receive the distillation loss.

Each registry entry is a ``PositionSelector``: the per-position score its rule ranks (so the trainer knows
which extra forward to run) and a pure ``select`` function returning a (B, T) bool mask that is a subset of
the valid-response mask. Keys:

- ``all``: every valid position (SCOPD, LT-OPD; the "dense" ablation row).
- ``top_sensitivity``: SCOPD+ (SCOPD Eq. 8): per sequence, the k_i = ⌈ρ·T_i⌉ positions with the largest visual
  sensitivity S_it (Eq. 7, ``visual_sensitivity``), T_i = number of valid positions of sequence i.
- ``bottom_sensitivity``: the k_i least sensitive positions (the paper's negative control).
- ``top_kl``: the k_i positions with the largest teacher–student divergence (the paper's "largest KL" row).
- ``random``: k_i positions drawn uniformly without replacement from a seeded ``torch.Generator``.
- ``tip``: the k_i positions with the largest TIP Soft-OR score (Xu et al. 2026, arXiv 2604.14084; SCOPD
  Table 2's "TIP" row), which combines the student's uncertainty and the teacher–student disagreement
  (``tip_scores``).

k_i follows the seed's Eq. 8 exactly: ⌈ρ·T_i⌉ (so every non-empty rollout contributes at least one position),
computed as ⌈ρ·T_i - 1e-9⌉ so that float products like 0.1·30 = 3.0000000000000004 don't round up to 4.
Selection is per sequence (the seed's K_i is indexed by i); a per-batch variant is not implemented. Ties go to
the earlier position (stable sort). Scores are detached and must not be NaN at valid positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import torch

from sparsectx.registry import Registry
from sparsectx.training.divergences import jsd

ScoreKind = Literal["none", "sensitivity", "teacher_divergence", "tip"]


class SelectPositions(Protocol):
    """Signature of every selection rule (extra keyword arguments, e.g. ``fraction``, come from YAML)."""

    def __call__(
        self,
        mask: torch.Tensor,
        scores: torch.Tensor | None,
        *,
        generator: torch.Generator | None,
        **params: float,
    ) -> torch.Tensor:
        """Returns a (B, T) bool mask, a subset of ``mask``."""
        ...


@dataclass(frozen=True)
class PositionSelector:
    """One registry entry: the score the rule needs and the rule itself."""

    score: ScoreKind
    """Which (B, T) score the trainer must compute and pass as ``scores`` ("none" → pass None; "tip" →
    ``tip_scores`` of the student logits and the detached loss divergence)."""
    select: SelectPositions
    """The pure selection function."""


POSITION_SELECTORS: Registry[PositionSelector] = Registry("position selector")


def visual_sensitivity(
    student_logits: torch.Tensor,
    probe_logits: torch.Tensor,
    mask: torch.Tensor,
    *,
    chunk_size: int,
    temperature: float,
) -> torch.Tensor:
    """Returns (B, T) fp32 visual sensitivity S_it = JSD_0.5(p^b_it, p^{b+δ}_it) (SCOPD Eq. 7), no gradient.

    S = ½KL(p^b‖m) + ½KL(p^{b+}‖m), m = ½(p^b + p^{b+}), over the full vocabulary; symmetric, ≤ ln 2. Both
    inputs are detached and computed under ``no_grad`` (the probe branch never trains).

    Args:
        student_logits: (B, T, V) the student's logits at budget b on the rollout prefix.
        probe_logits: (B, T, V) the same student's logits at budget b+δ (SCOPD Eq. 5-6), same prefix.
        mask: (B, T) bool valid response positions; others return 0.
        chunk_size: positions per fp32 chunk.
        temperature: loss temperature applied to both (1.0 in SCOPD).
    """
    with torch.no_grad():
        return jsd(
            student_logits=student_logits.detach(),
            teacher_logits=probe_logits.detach(),
            mask=mask,
            sampled_ids=None,
            beta=0.5,
            top_k=None,
            chunk_size=chunk_size,
            temperature=temperature,
        )


def student_entropy(
    student_logits: torch.Tensor, mask: torch.Tensor, *, chunk_size: int, temperature: float
) -> torch.Tensor:
    """Returns (B, T) fp32 H(p_t) = -Σ_v p_t(v) log p_t(v), the student's entropy over the full vocabulary.

    Computed under ``no_grad`` in fp32 chunks of ``chunk_size`` positions, with p_t = softmax(z_t / T);
    positions outside ``mask`` return 0.

    Args:
        student_logits: (B, T, V) the student's logits on the rollout prefix.
        mask: (B, T) bool valid response positions.
        chunk_size: positions per fp32 chunk.
        temperature: loss temperature T (> 0).
    """
    rows = mask.reshape(-1).nonzero().squeeze(1)
    flat = student_logits.detach().reshape(-1, student_logits.shape[-1])
    out = torch.zeros(mask.numel(), dtype=torch.float32, device=student_logits.device)
    with torch.no_grad():
        for start in range(0, rows.numel(), chunk_size):
            index = rows[start : start + chunk_size]
            logp = torch.log_softmax(flat.index_select(0, index).float() / temperature, dim=-1)
            out[index] = -(logp.exp() * logp).sum(dim=-1)
    return out.view(mask.shape)


def _min_max_per_sequence(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Returns (B, T) (x - min_i) / (max_i - min_i) over each sequence's valid positions (0 if max = min)."""
    x = values.detach().float()
    low = torch.where(mask, x, torch.inf).amin(dim=-1, keepdim=True)
    high = torch.where(mask, x, -torch.inf).amax(dim=-1, keepdim=True)
    span = high - low
    scaled = torch.where(span > 0, (x - low) / torch.where(span > 0, span, 1.0), 0.0)
    return torch.where(mask, scaled, 0.0)


def tip_scores(
    student_logits: torch.Tensor,
    divergence: torch.Tensor,
    mask: torch.Tensor,
    *,
    chunk_size: int,
    temperature: float,
) -> torch.Tensor:
    """Returns (B, T) fp32 TIP Soft-OR scores s_t = Ĥ_t + D̂_t - Ĥ_t·D̂_t in [0, 1], no gradient.

    TIP (Xu et al. 2026, "TIP: Token Importance in On-Policy Distillation", arXiv 2604.14084): informative
    positions are those where the student is uncertain (high entropy H_t) OR confidently disagrees with the
    teacher (low H_t, high divergence D_t); its Soft-OR score is the probabilistic OR of the two min-max
    normalised axes. Here Ĥ and D̂ are normalised over each sequence's valid positions (TIP normalises per
    batch; per sequence keeps the selection independent of ``micro_batch_size``, as the loop's 1×N = N×1
    invariant requires). A constant axis normalises to 0.

    Args:
        student_logits: (B, T, V) the student's logits (H_t from ``student_entropy``).
        divergence: (B, T) detached per-position teacher–student divergence (the loss's divergence).
        mask: (B, T) bool valid response positions; others return 0.
        chunk_size: positions per fp32 chunk of the entropy.
        temperature: loss temperature applied to the student's distribution.
    """
    entropy = student_entropy(student_logits, mask, chunk_size=chunk_size, temperature=temperature)
    h, d = _min_max_per_sequence(entropy, mask), _min_max_per_sequence(divergence, mask)
    return torch.where(mask, h + d - h * d, 0.0)


def positions_per_sequence(mask: torch.Tensor, fraction: float) -> torch.Tensor:
    """Returns (B,) int64 k_i = ⌈ρ·T_i⌉ (SCOPD Eq. 8), 0 for sequences without valid positions.

    Args:
        mask: (B, T) bool valid response positions; T_i = mask[i].sum().
        fraction: ρ in (0, 1].
    """
    if isinstance(fraction, bool) or not 0.0 < float(fraction) <= 1.0:
        raise ValueError(f"fraction={fraction!r} must lie in (0, 1]: ρ, the share of positions distilled")
    lengths = mask.sum(dim=-1).double()
    return torch.ceil(lengths * float(fraction) - 1e-9).clamp_min(0).long()


def select_top_fraction(scores: torch.Tensor, mask: torch.Tensor, fraction: float) -> torch.Tensor:
    """Returns a (B, T) bool mask of the ⌈ρ·T_i⌉ highest-scoring valid positions of each sequence (Eq. 8).

    Args:
        scores: (B, T) float; higher = selected first. Values at invalid positions are ignored.
        mask: (B, T) bool valid positions.
        fraction: ρ in (0, 1].
    """
    if scores.shape != mask.shape or mask.dtype != torch.bool or mask.dim() != 2:
        raise ValueError(f"scores {tuple(scores.shape)} and mask {tuple(mask.shape)} must both be (B, T), mask bool")
    k = positions_per_sequence(mask, fraction)
    # Two stable sorts: by score (descending), then valid-first; ties keep the earlier position.
    order = scores.detach().float().argsort(dim=-1, descending=True, stable=True)
    valid_sorted = mask.gather(1, order)
    order = order.gather(1, valid_sorted.to(torch.uint8).argsort(dim=-1, descending=True, stable=True))
    steps = mask.shape[-1]
    ranks = torch.empty_like(order).scatter_(1, order, torch.arange(steps, device=mask.device).expand_as(order))
    return (ranks < k.unsqueeze(1)) & mask


def select_all(mask: torch.Tensor, scores: torch.Tensor | None, *, generator: torch.Generator | None) -> torch.Tensor:
    """Returns ``mask`` unchanged: dense distillation on every valid position (SCOPD Eq. 4).

    Args:
        mask: (B, T) bool valid response positions.
        scores: unused (pass None).
        generator: unused.
    """
    return mask.clone()


def _require_scores(scores: torch.Tensor | None, name: str) -> torch.Tensor:
    if scores is None:
        raise ValueError(f"position selector {name!r} ranks a (B, T) score; the trainer passed scores=None")
    return scores


def select_top_sensitivity(
    mask: torch.Tensor, scores: torch.Tensor | None, *, generator: torch.Generator | None, fraction: float
) -> torch.Tensor:
    """Returns the SCOPD+ mask K_i = TopK_t(S_it, ⌈ρ·T_i⌉) per sequence (SCOPD Eq. 8).

    Args:
        mask: (B, T) bool valid response positions.
        scores: (B, T) visual sensitivity from ``visual_sensitivity``.
        generator: unused.
        fraction: ρ in (0, 1] (0.1 in the paper).
    """
    return select_top_fraction(_require_scores(scores, "top_sensitivity"), mask, fraction)


def select_bottom_sensitivity(
    mask: torch.Tensor, scores: torch.Tensor | None, *, generator: torch.Generator | None, fraction: float
) -> torch.Tensor:
    """Returns the ⌈ρ·T_i⌉ LEAST visually sensitive positions per sequence (the SCOPD+ negative control).

    Args:
        mask: (B, T) bool valid response positions.
        scores: (B, T) visual sensitivity from ``visual_sensitivity``.
        generator: unused.
        fraction: ρ in (0, 1].
    """
    return select_top_fraction(-_require_scores(scores, "bottom_sensitivity").detach().float(), mask, fraction)


def select_top_kl(
    mask: torch.Tensor, scores: torch.Tensor | None, *, generator: torch.Generator | None, fraction: float
) -> torch.Tensor:
    """Returns the ⌈ρ·T_i⌉ positions with the largest teacher–student divergence per sequence (ablation).

    Args:
        mask: (B, T) bool valid response positions.
        scores: (B, T) detached per-position divergence in the loss's direction (e.g. ``forward_kl``).
        generator: unused.
        fraction: ρ in (0, 1].
    """
    return select_top_fraction(_require_scores(scores, "top_kl"), mask, fraction)


def select_tip(
    mask: torch.Tensor, scores: torch.Tensor | None, *, generator: torch.Generator | None, fraction: float
) -> torch.Tensor:
    """Returns the ⌈ρ·T_i⌉ positions with the largest TIP Soft-OR score per sequence (SCOPD Table 2 "TIP").

    Args:
        mask: (B, T) bool valid response positions.
        scores: (B, T) Soft-OR scores from ``tip_scores``.
        generator: unused.
        fraction: ρ in (0, 1].
    """
    return select_top_fraction(_require_scores(scores, "tip"), mask, fraction)


def select_random(
    mask: torch.Tensor, scores: torch.Tensor | None, *, generator: torch.Generator | None, fraction: float
) -> torch.Tensor:
    """Returns ⌈ρ·T_i⌉ valid positions per sequence drawn uniformly without replacement (ablation).

    Args:
        mask: (B, T) bool valid response positions.
        scores: unused (pass None).
        generator: the only randomness used; the same seed gives the same mask.
        fraction: ρ in (0, 1].
    """
    if generator is None:
        raise ValueError("position selector 'random' needs a seeded torch.Generator; the trainer passed None")
    draws = torch.rand(mask.shape, generator=generator, device=generator.device).to(mask.device)
    return select_top_fraction(draws, mask, fraction)


POSITION_SELECTORS.register("all")(PositionSelector(score="none", select=select_all))
POSITION_SELECTORS.register("top_sensitivity")(PositionSelector(score="sensitivity", select=select_top_sensitivity))
POSITION_SELECTORS.register("bottom_sensitivity")(
    PositionSelector(score="sensitivity", select=select_bottom_sensitivity)
)
POSITION_SELECTORS.register("top_kl")(PositionSelector(score="teacher_divergence", select=select_top_kl))
POSITION_SELECTORS.register("random")(PositionSelector(score="none", select=select_random))
POSITION_SELECTORS.register("tip")(PositionSelector(score="tip", select=select_tip))
