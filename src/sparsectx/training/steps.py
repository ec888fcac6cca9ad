"""One micro-batch's share of the step loss, on the inputs ``sparsectx.training.contexts`` prepared.

``micro_loss`` runs the student forward with gradients, the teacher and probe forwards without, picks
the distilled positions and reduces the per-position loss with counts taken over the WHOLE optimizer step
(``StepCounts``), so summing micro-batch losses gives the step loss and accumulation 1×N equals N×1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from sparsectx.context import build_context
from sparsectx.generation import response_logits
from sparsectx.training.config import TrainConfig
from sparsectx.training.contexts import MicroBatch
from sparsectx.training.decode_copy import teacher_twin, uses_copy
from sparsectx.training.divergences import DIVERGENCES
from sparsectx.training.positions import (
    POSITION_SELECTORS,
    tip_scores,
    visual_sensitivity,
)
from sparsectx.training.reduction import reduce_loss
from sparsectx.training.rewards import has_format
from sparsectx.training.rl import clipped_surrogate, k3_kl, rl_stats, token_logprobs
from sparsectx.training.rollout import is_correct
from sparsectx.training.student import Student, mode
from sparsectx.training.teachers import TEACHERS, teacher_logits, trust_region_logits
from sparsectx.training.vision_training import trained_inputs

if TYPE_CHECKING:
    from sparsectx.training.token_trace import TokenTrace


class NonFiniteLossError(RuntimeError):
    """A loss or gradient norm is NaN/inf; the run stops and keeps its last good state and checkpoint."""


@dataclass
class StepCounts:
    """Normalisers of one optimizer step, summed over every micro-batch and process."""

    sequences: int
    """Sequences with at least one distilled position."""
    tokens: int
    """Distilled positions."""


def token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Returns (B, T) fp32 -log p(y_t) at ``mask`` positions (0 elsewhere); SFT's per-token loss.

    Args:
        logits: (B, T, V) student logits predicting each prefix token.
        targets: (B, T) int64 prefix ids.
        mask: (B, T) bool positions to score.
    """
    rows = mask.reshape(-1).nonzero().squeeze(1)
    flat = logits.reshape(-1, logits.shape[-1]).index_select(0, rows).float()
    values = F.cross_entropy(flat, targets.reshape(-1)[rows], reduction="none")
    out = torch.zeros(mask.numel(), dtype=torch.float32, device=logits.device)
    return out.index_put((rows,), values).view(mask.shape)


def _probe_sensitivity(cfg: TrainConfig, student: Student, mb: MicroBatch, s_logits: torch.Tensor) -> torch.Tensor:
    """Returns (B, T) visual sensitivity JSD_0.5(p_b, p_{b+δ}) on the same prefix (SCOPD Eq. 7), no grad."""
    with torch.no_grad(), mode(student.model, training=False), student.compute():
        batch = build_context(student.adapter, mb.encoded, mb.probe_selections, mb.prefix.tokens)
        probe_logits, _ = response_logits(student.adapter, batch)
    div = cfg.method.divergence
    return visual_sensitivity(s_logits, probe_logits, mb.valid, chunk_size=div.chunk_size, temperature=div.temperature)


def _divergence(
    cfg: TrainConfig, s_logits: torch.Tensor, t_logits: torch.Tensor, mask: torch.Tensor, ids: torch.Tensor
) -> torch.Tensor:
    """Returns (B, T) fp32 ``method.divergence`` between student and teacher logits at ``mask`` positions."""
    div = cfg.method.divergence
    return DIVERGENCES.get(div.name)(
        student_logits=s_logits,
        teacher_logits=t_logits,
        mask=mask,
        sampled_ids=ids,
        top_k=div.top_k,
        chunk_size=div.chunk_size,
        temperature=div.temperature,
        **div.extra(),
    )


def _reduce(cfg: TrainConfig, per_token: torch.Tensor, selected: torch.Tensor, counts: StepCounts) -> torch.Tensor:
    """Returns the micro-batch's share of the step loss under ``method.reduction`` (step-wide counts)."""
    return reduce_loss(
        cfg.method.reduction,
        per_token,
        selected,
        num_sequences=counts.sequences,
        num_tokens=counts.tokens,
        max_length=cfg.max_new_tokens,
    )


def _reference_logprobs(cfg: TrainConfig, student: Student, mb: MicroBatch) -> torch.Tensor:
    """Returns (B, T) fp32 log π_ref(y_t) of the frozen initial model at the SAME pruned context (no grad)."""
    rl = cfg.method.rl
    with torch.no_grad(), TEACHERS.get("frozen")(student) as ref, student.compute():
        with mode(ref.model, training=False):
            batch = build_context(ref, mb.encoded, mb.selections, mb.prefix.tokens)
            logits, _ = response_logits(ref, batch)
        return token_logprobs(logits, mb.ids, cfg.method.rollout.temperature, rl.chunk_size)


def _policy_loss(
    cfg: TrainConfig,
    s_logits: torch.Tensor,
    mb: MicroBatch,
    mask: torch.Tensor,
    ref_logp: torch.Tensor | None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Returns the (B, T) clipped-surrogate (+ β·k3 KL) loss of the rollouts and its statistics (spec §5.4).

    The old log-probabilities are those of the policy that sampled, at the rollouts' sampling temperature: on
    the generation step the detached current ones (ratio 1), recorded in ``mb.old_logp`` for the steps that
    reuse the rollouts (``method.rl.num_iterations`` > 1; ``groups.reused_groups`` brings them back).
    """
    rl = cfg.method.rl
    logp = token_logprobs(s_logits, mb.ids, cfg.method.rollout.temperature, rl.chunk_size)
    if mb.old_logp is None:
        mb.old_logp = logp.detach()
    per_token, clipped = clipped_surrogate(
        logp,
        mb.old_logp,
        mb.group.advantages,
        mask,
        epsilon_low=rl.epsilon_low,
        epsilon_high=rl.epsilon_high,
        level=rl.importance_sampling_level,
    )
    kl = None
    if ref_logp is not None:
        kl = k3_kl(logp, ref_logp)
        per_token = per_token + rl.beta * kl
    return per_token, rl_stats(mb.group, kl, clipped, mask)


def _teacher_logits(
    cfg: TrainConfig, student: Student, mb: MicroBatch, stored_teacher: torch.Tensor | None
) -> torch.Tensor | None:
    """Returns the (B, T, V) teacher logits the objective needs (None for SFT and RL), no grad.

    The step's offloaded teacher phase may have stored them (``stored_teacher``); otherwise the teacher of
    ``method.teacher.kind`` runs here, on the merged twin when ``teacher_weights`` is ``copy``.
    """
    method = cfg.method
    if stored_teacher is not None:
        return stored_teacher.to(student.model.device)
    if method.objective not in ("distill", "distill_sft"):
        return None
    twin = None
    if uses_copy(cfg.teacher_weights, student):
        twin = lambda: teacher_twin(student, cfg.model.signal_chunk)  # noqa: E731
    view = (mb.teacher_encoded, mb.prefix.tokens, twin, mb.teacher_selections, mb.vision)
    t_logits = teacher_logits(student, method.teacher.kind, *view)
    if method.teacher.kind == "trust_region":  # lerp towards the current student's logits (spec §1.8)
        current = teacher_logits(student, "shared", *view)
        t_logits = trust_region_logits(t_logits, current, method.teacher.trust_region_lambda)
    return t_logits


def _select_positions(
    cfg: TrainConfig,
    mb: MicroBatch,
    s_logits: torch.Tensor,
    t_logits: torch.Tensor | None,
    sensitivity: torch.Tensor | None,
    generator: torch.Generator,
) -> torch.Tensor:
    """Returns the (B, T) bool positions ``method.positions`` picks, exactly the step's planned count per row.

    Raises:
        RuntimeError: the selector picked another count than planned (the step's normaliser would be wrong).
    """
    method = cfg.method
    selector = POSITION_SELECTORS.get(method.positions.name)
    scores = sensitivity
    if selector.score in ("teacher_divergence", "tip"):
        with torch.no_grad():
            scores = _divergence(cfg, s_logits.detach(), t_logits, mb.valid, mb.ids)
            if selector.score == "tip":  # Soft-OR of student entropy and this divergence (Xu et al. 2026)
                div = method.divergence
                scores = tip_scores(s_logits, scores, mb.valid, chunk_size=div.chunk_size, temperature=div.temperature)
    selected = selector.select(mb.valid, scores, generator=generator, **method.positions.extra())
    if not torch.equal(selected.sum(dim=-1), mb.planned):
        raise RuntimeError(
            f"position selector {method.positions.name!r} picked {selected.sum(-1).tolist()}, "
            f"planned {mb.planned.tolist()}: the step's loss normaliser would be wrong"
        )
    return selected


def _objective(
    cfg: TrainConfig,
    mb: MicroBatch,
    s_logits: torch.Tensor,
    t_logits: torch.Tensor | None,
    selected: torch.Tensor,
    ref_logp: torch.Tensor | None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Returns the (B, T) per-position loss of ``method.objective`` at ``selected`` and its extra statistics."""
    method = cfg.method
    if method.objective == "sft":
        return token_cross_entropy(s_logits, mb.ids, selected), {}
    if method.objective == "rl":
        return _policy_loss(cfg, s_logits, mb, selected, ref_logp)
    divergence = _divergence(cfg, s_logits, t_logits, selected, mb.ids)
    if method.objective == "distill_sft":  # EPIC: α·KL(teacher‖student) + (1 − α)·CE, same positions
        alpha = float(method.distill_weight)
        return alpha * divergence + (1.0 - alpha) * token_cross_entropy(s_logits, mb.ids, selected), {}
    return divergence, {}


def micro_loss(
    cfg: TrainConfig,
    student: Student,
    mb: MicroBatch,
    counts: StepCounts,
    generator: torch.Generator,
    stored_teacher: torch.Tensor | None = None,
    trace: TokenTrace | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Returns this micro-batch's share of the step loss (grad attached) and its summed statistics.

    Args:
        cfg: the run config.
        student: the model.
        mb: the prepared micro-batch.
        counts: the whole step's normalisers.
        generator: the random position selector's generator.
        stored_teacher: (B, T, V) teacher logits from the step's offloaded teacher phase
            (``memory.offloaded_teacher_logits``), or None to run the teacher here.
        trace: the traced step's per-token collector (``token_trace``), or None; it reads, never changes, the loss.
    """
    method = cfg.method
    # The teacher goes first: the EMA swap writes the weights in place, which must not happen while the
    # student's autograd graph holds them.
    t_logits = _teacher_logits(cfg, student, mb, stored_teacher)
    ref_logp = None
    if method.objective == "rl" and method.rl.beta > 0:
        ref_logp = _reference_logprobs(cfg, student, mb)
    with mode(student.model, training=True), student.compute():
        encoded, selections = mb.encoded, mb.selections
        if mb.vision is not None:  # the tower trains: recompute it with gradients, same kept tokens
            encoded, selections = trained_inputs(student.adapter, cfg.pruner, encoded, selections, mb.vision)
        batch = build_context(student.adapter, encoded, selections, mb.prefix.tokens)
        s_logits, _ = response_logits(student.adapter, batch)
    sensitivity = _probe_sensitivity(cfg, student, mb, s_logits) if method.positions.needs_probe else None
    selected = _select_positions(cfg, mb, s_logits, t_logits, sensitivity, generator)
    if trace is not None:
        trace.add(cfg, student.processor.tokenizer, mb, s_logits, t_logits, sensitivity, selected)
    per_token, extra = _objective(cfg, mb, s_logits, t_logits, selected, ref_logp)
    loss = _reduce(cfg, per_token, selected, counts)
    stats = micro_stats(mb, per_token, selected, sensitivity, loss, method.prefix == "rollout")
    return loss, {**stats, **extra}


def micro_stats(
    mb: MicroBatch,
    per_token: torch.Tensor,
    selected: torch.Tensor,
    sensitivity: torch.Tensor | None,
    loss: torch.Tensor,
    on_policy: bool,
) -> dict[str, float]:
    """Returns the micro-batch's statistics as sums and counts (they add across micro-batches and ranks)."""
    kept = [sum(s.indices.numel() for s in sel) for sel in mb.selections]
    total = [sum(image.num_tokens for image in s.images) for s in mb.encoded]
    teacher_kept = total  # a full-context teacher keeps every visual token
    if mb.teacher_selections is not None:
        teacher_kept = [sum(s.indices.numel() for s in sel) for sel in mb.teacher_selections]
    stats = {
        "loss": float(loss.detach()),
        "divergence_sum": float(per_token.detach()[selected].sum()),
        "selected": float(selected.sum()),
        "valid": float(mb.valid.sum()),
        "sequences": float(len(mb.items)),
        "length_sum": float(mb.valid.sum()),
        "stopped": float(sum(mb.prefix.stopped)),
        "kept_visual": float(sum(kept)),
        "teacher_kept_visual": float(sum(teacher_kept)),
        "visual": float(sum(total)),
        "sensitivity_sum": 0.0 if sensitivity is None else float(sensitivity[mb.valid].sum()),
        "sensitivity_n": 0.0 if sensitivity is None else float(mb.valid.sum()),
        **dict.fromkeys(ROLLOUT_SUMS, 0.0),
    }
    if on_policy:
        stats.update(rollout_sums(mb))
    return stats


ROLLOUT_SUMS = (
    "graded",
    "correct",
    "formatted",
    "correct_length_sum",
    "wrong_length_sum",
    "groups",
    "groups_all_correct",
    "groups_mixed",
)
"""Sums of ``rollout_sums`` (every micro-batch has each key, so they add across micro-batches and ranks)."""


def rollout_sums(mb: MicroBatch) -> dict[str, float]:
    """Returns an on-policy micro-batch's rollout statistics as sums: graded and correct rollouts, those in the
    ``<think>``/``<answer>`` format, response lengths of correct and wrong ones, and for groups of G rollouts of
    one prompt (RL) how many groups there are, all correct, and mixed (SCOPD Fig. 7)."""
    correct = [is_correct(t, it) for t, it in zip(mb.prefix.texts, mb.items, strict=True)]
    lengths = [float(t.numel()) for t in mb.prefix.tokens]
    sums = {
        "graded": float(len(correct)),
        "correct": float(sum(correct)),
        "formatted": float(sum(has_format(t) for t in mb.prefix.texts)),
        "correct_length_sum": sum(n for n, ok in zip(lengths, correct, strict=True) if ok),
        "wrong_length_sum": sum(n for n, ok in zip(lengths, correct, strict=True) if not ok),
        "groups": 0.0,
        "groups_all_correct": 0.0,
        "groups_mixed": 0.0,
    }
    if mb.group is not None:
        size = mb.group.group_size
        groups = [correct[i : i + size] for i in range(0, len(correct), size)]
        sums["groups"] = float(len(groups))
        sums["groups_all_correct"] = float(sum(all(g) for g in groups))
        sums["groups_mixed"] = float(sum(any(g) and not all(g) for g in groups))
    return sums
