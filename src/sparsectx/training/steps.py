"""One micro-batch: build its contexts from one encoding, get the prefix, compute its share of the step loss.

``prepare_step`` runs without gradients: per micro-batch, encode the prompts once (vision tower once), select
the student's tokens at budget b (and b+δ for the sensitivity probe) and build the teacher's prompt; then one
prefix call serves the whole step (all rollouts decode together).
``micro_loss`` then runs the student forward with gradients, the teacher and probe forwards without, picks
the distilled positions and reduces the per-position loss with counts taken over the WHOLE optimizer step
(``StepCounts``), so summing micro-batch losses gives the step loss and accumulation 1×N equals N×1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from sparsectx.context import build_context
from sparsectx.data import Item
from sparsectx.data.synthetic import derive_seed
from sparsectx.encoding import EncodedSample, encode_samples
from sparsectx.generation import response_logits
from sparsectx.pruning import select_tokens
from sparsectx.training import reduction
from sparsectx.training.batches import reencode_text, with_reference
from sparsectx.training.config import TrainConfig
from sparsectx.training.decode_copy import rollout_adapter, uses_copy
from sparsectx.training.divergences import DIVERGENCES
from sparsectx.training.positions import (
    POSITION_SELECTORS,
    positions_per_sequence,
    tip_scores,
    visual_sensitivity,
)
from sparsectx.training.prefetch import Batch, HostInputs, host_inputs
from sparsectx.training.rl import GroupBatch, clipped_surrogate, k3_kl, rl_stats, token_logprobs
from sparsectx.training.rollout import PREFIX_SOURCES, Prefix, PrefixInputs, is_correct
from sparsectx.training.student import Student, mode
from sparsectx.training.teachers import TEACHERS, teacher_logits, trust_region_logits
from sparsectx.visual import Selection


class NonFiniteLossError(RuntimeError):
    """A loss or gradient norm is NaN/inf; the run stops and keeps its last good state and checkpoint."""


@dataclass
class StepCounts:
    """Normalisers of one optimizer step, summed over every micro-batch and process."""

    sequences: int
    """Sequences with at least one distilled position."""
    tokens: int
    """Distilled positions."""


@dataclass
class MicroContexts:
    """One micro-batch's no-grad inputs before its prefix.

    Attributes:
        items: the training items.
        positions: their global sample positions.
        encoded: the student's encoded prompts (one vision-tower run).
        teacher_encoded: the teacher's prompts (same images; with the reference for SCOPD+GT).
        selections: per sample, the student's per-image selection at budget b.
        probe_selections: the same at b+δ for the sensitivity probe, else None.
        teacher_selections: per sample, the teacher's per-image selection at its own milder budget
            (``method.teacher.budget_gap``, EPIC), or None: the teacher keeps every visual token.
    """

    items: list[Item]
    positions: list[int]
    encoded: list[EncodedSample]
    teacher_encoded: list[EncodedSample]
    selections: list[list[Selection]]
    probe_selections: list[list[Selection]] | None
    teacher_selections: list[list[Selection]] | None = field(default=None, kw_only=True)


@dataclass
class MicroBatch(MicroContexts):
    """One micro-batch after the no-grad phase: its contexts, prefix and the planned position counts.

    Attributes:
        prefix: the response prefixes.
        ids: (B, T) int64 prefix ids, right-padded.
        valid: (B, T) bool real prefix positions.
        planned: (B,) int64 positions each sequence contributes (k_i).
    """

    prefix: Prefix
    ids: torch.Tensor
    valid: torch.Tensor
    planned: torch.Tensor
    group: GroupBatch | None = None
    """Rewards and advantages of the G-rollout groups (objective ``rl``, ``training.groups``); else None."""
    old_logp: torch.Tensor | None = None
    """(B, T) fp32 log-probabilities of the policy that sampled the rollouts (objective ``rl``): None on the
    generation step (``_policy_loss`` sets them to the detached current ones), kept when they are reused."""


def nested_union(inner: Selection, outer: Selection) -> Selection:
    """Returns the selection keeping every token of ``inner`` plus those of ``outer`` (inner's vectors win).

    The b+δ probe context is then a superset of x_b (spec §3, "nested"), whatever the pruner does at b+δ.
    """
    indices = torch.cat([inner.indices, outer.indices])
    unique, inverse = torch.unique(indices, sorted=True, return_inverse=True)
    order = torch.arange(indices.numel(), device=indices.device)
    first = torch.full((unique.numel(),), indices.numel(), dtype=torch.long, device=indices.device)
    first = first.scatter_reduce(0, inverse, order, reduce="amin")  # inner entries come first in the concat
    take = lambda a, b: torch.cat([a, b])[first]  # noqa: E731
    deepstack = tuple(take(a, b) for a, b in zip(inner.deepstack, outer.deepstack, strict=True))
    return Selection(indices=unique, embeds=take(inner.embeds, outer.embeds), deepstack=deepstack)


def select_images(cfg: TrainConfig, sample: EncodedSample, budget: float, position: int) -> list[Selection]:
    """Returns the pruner's selection of each image of ``sample`` at ``budget``, seeded per (position, image).

    The same seed serves b and b+δ, so a pruner that draws a permutation (random) is nested by construction.
    """
    out = []
    for index, image in enumerate(sample.images):
        generator = torch.Generator().manual_seed(derive_seed(cfg.seed, "prune", position, index))
        out.append(
            select_tokens(
                cfg.pruner.name, image, sample.question_embeds, budget, generator, cfg.pruner.params
            )
        )
    return out


def probe_images(
    cfg: TrainConfig, sample: EncodedSample, inner: list[Selection], budget: float, position: int
):
    """Returns the per-image selections of the b+δ probe (``method.positions.probe_nesting``)."""
    outer = select_images(cfg, sample, min(1.0, budget + float(cfg.method.positions.delta)), position)
    if cfg.method.positions.probe_nesting == "recompute":
        return outer
    return [nested_union(a, b) for a, b in zip(inner, outer, strict=True)]


def planned_counts(valid: torch.Tensor, cfg: TrainConfig) -> torch.Tensor:
    """Returns (B,) int64 k_i, the positions the selector will pick per sequence (known before forwards)."""
    fraction = cfg.method.positions.fraction
    if fraction is None:
        return valid.sum(dim=-1)
    return positions_per_sequence(valid, fraction)


def micro_contexts(
    cfg: TrainConfig, student: Student, items: list[Item], positions: list[int], budget: float,
    host: HostInputs | None = None, teacher_budget: float | None = None,
) -> MicroContexts:  # fmt: skip
    """Returns the micro-batch's contexts; no gradients, the vision tower runs once.

    Args:
        cfg: the run config.
        student: the model.
        items: the micro-batch's items.
        positions: their global sample positions (seed the pruner and name the samples).
        budget: the student's budget b this step.
        host: the micro-batch's prompts and processor batch if already built (prefetched), else None.
        teacher_budget: the teacher's own budget this step (``method.teacher.budget_gap``), or None for the
            full visual context. The pruner re-selects at it from the student's prompt, with the student's
            seed (EPIC re-runs its pruner at the milder ratio; not forced to nest, unlike the b+δ union).
    """
    method = cfg.method
    if host is None:
        host = host_inputs(cfg, student.processor, (items, positions), pin=False)
    prompts = host.prompts
    with torch.no_grad():
        encoded = encode_samples(student.adapter, student.processor, prompts, host.batch)
        selections = [select_images(cfg, s, budget, p) for s, p in zip(encoded, positions, strict=True)]
        probe = None
        if method.positions.needs_probe:
            probe = [
                probe_images(cfg, s, sel, budget, p)
                for s, sel, p in zip(encoded, selections, positions, strict=True)
            ]
        teacher_encoded = encoded
        if method.teacher.reference_in_prompt:
            template = method.teacher.reference_template
            teacher_encoded = [
                reencode_text(student.adapter, student.processor, with_reference(pr, it, template), s)
                for pr, it, s in zip(prompts, items, encoded, strict=True)
            ]
        teacher_selections = None
        if teacher_budget is not None:
            teacher_selections = [
                select_images(cfg, s, teacher_budget, p) for s, p in zip(encoded, positions, strict=True)
            ]
    return MicroContexts(
        items, positions, encoded, teacher_encoded, selections, probe, teacher_selections=teacher_selections
    )


def step_prefixes(
    cfg: TrainConfig, student: Student, contexts: list[MicroContexts], generator: torch.Generator
) -> list[Prefix]:
    """Returns each micro-batch's prefix from ONE prefix-source call over the whole step.

    Rollouts of every micro-batch decode together (``rollout_batch_size`` at a time, default all), so the
    engine's batch is the step, not the micro-batch; ``micro_batch_size`` only sizes the gradient passes.
    """
    joined = lambda field: [x for c in contexts for x in getattr(c, field)]  # noqa: E731
    inputs = PrefixInputs(
        student, joined("items"), joined("encoded"), joined("selections"),
        cfg.method.rollout.sampling(cfg.max_new_tokens), generator, cfg.engine, cfg.rollout_batch_size,
        cfg.rollout_weights,
    )  # fmt: skip
    prefix = PREFIX_SOURCES.get(cfg.method.prefix)(inputs)
    out, start = [], 0
    for c in contexts:
        end = start + len(c.items)
        out.append(Prefix(prefix.tokens[start:end], prefix.texts[start:end], prefix.stopped[start:end]))
        start = end
    return out


def prepare_step(
    cfg: TrainConfig, student: Student, batches: list[Batch], budget: float, generator: torch.Generator,
    hosts: list[HostInputs] | None = None, teacher_budget: float | None = None,
) -> list[MicroBatch]:  # fmt: skip
    """Returns the step's micro-batches: contexts per micro-batch, then one prefix call for all of them.

    Args:
        batches: per micro-batch, its items and their global sample positions.
        generator: the rollout sampler's generator (one stream for the step).
        hosts: per micro-batch, its already-built host inputs (``training.prefetch``), or None.
        teacher_budget: the teacher's own budget this step, or None for the full visual context.
    """
    hosts = hosts or [None] * len(batches)
    contexts = [
        micro_contexts(cfg, student, items, positions, budget, host, teacher_budget)
        for (items, positions), host in zip(batches, hosts, strict=True)
    ]
    micro = []
    for c, prefix in zip(contexts, step_prefixes(cfg, student, contexts, generator), strict=True):
        ids, valid = prefix.padded()
        micro.append(
            MicroBatch(
                c.items,
                c.positions,
                c.encoded,
                c.teacher_encoded,
                c.selections,
                c.probe_selections,
                prefix,
                ids,
                valid,
                planned_counts(valid, cfg),
                teacher_selections=c.teacher_selections,
            )  # fmt: skip
        )
    return micro


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


def _probe_sensitivity(
    cfg: TrainConfig, student: Student, mb: MicroBatch, s_logits: torch.Tensor
) -> torch.Tensor:
    """Returns (B, T) visual sensitivity JSD_0.5(p_b, p_{b+δ}) on the same prefix (SCOPD Eq. 7), no grad."""
    with torch.no_grad(), mode(student.model, training=False), student.compute():
        batch = build_context(student.adapter, mb.encoded, mb.probe_selections, mb.prefix.tokens)
        probe_logits, _ = response_logits(student.adapter, batch)
    div = cfg.method.divergence
    return visual_sensitivity(
        s_logits, probe_logits, mb.valid, chunk_size=div.chunk_size, temperature=div.temperature
    )


def _divergence(
    cfg: TrainConfig, s_logits: torch.Tensor, t_logits: torch.Tensor, mask: torch.Tensor, ids: torch.Tensor
) -> torch.Tensor:
    """Returns (B, T) fp32 ``method.divergence`` between student and teacher logits at ``mask`` positions."""
    div = cfg.method.divergence
    return DIVERGENCES.get(div.name)(
        student_logits=s_logits, teacher_logits=t_logits, mask=mask, sampled_ids=ids, top_k=div.top_k,
        chunk_size=div.chunk_size, temperature=div.temperature, **div.extra(),
    )  # fmt: skip


def _reduce(
    cfg: TrainConfig, per_token: torch.Tensor, selected: torch.Tensor, counts: StepCounts
) -> torch.Tensor:
    """Returns the micro-batch's share of the step loss under ``method.reduction`` (step-wide counts)."""
    if cfg.method.reduction == "seq_mean_token_mean":
        return reduction.seq_mean_token_mean(per_token, selected, num_sequences=counts.sequences)
    if cfg.method.reduction == "constant_length":
        return reduction.constant_length(
            per_token, selected, num_sequences=counts.sequences, max_length=cfg.max_new_tokens
        )
    return reduction.global_token_mean(per_token, selected, num_tokens=counts.tokens)


def _reference_logprobs(cfg: TrainConfig, student: Student, mb: MicroBatch) -> torch.Tensor:
    """Returns (B, T) fp32 log π_ref(y_t) of the frozen initial model at the SAME pruned context (no grad)."""
    rl = cfg.method.rl
    with torch.no_grad(), TEACHERS.get("frozen")(student) as ref, student.compute():
        with mode(ref.model, training=False):
            batch = build_context(ref, mb.encoded, mb.selections, mb.prefix.tokens)
            logits, _ = response_logits(ref, batch)
        return token_logprobs(logits, mb.ids, cfg.method.rollout.temperature, rl.chunk_size)


def _policy_loss(
    cfg: TrainConfig, s_logits: torch.Tensor, mb: MicroBatch, mask: torch.Tensor,
    ref_logp: torch.Tensor | None,
) -> tuple[torch.Tensor, dict[str, float]]:  # fmt: skip
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
        logp, mb.old_logp, mb.group.advantages, mask, epsilon_low=rl.epsilon_low,
        epsilon_high=rl.epsilon_high, level=rl.importance_sampling_level,
    )  # fmt: skip
    kl = None
    if ref_logp is not None:
        kl = k3_kl(logp, ref_logp)
        per_token = per_token + rl.beta * kl
    return per_token, rl_stats(mb.group, kl, clipped, mask)


def micro_loss(
    cfg: TrainConfig, student: Student, mb: MicroBatch, counts: StepCounts, generator: torch.Generator,
    stored_teacher: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:  # fmt: skip
    """Returns this micro-batch's share of the step loss (grad attached) and its summed statistics.

    Args:
        cfg: the run config.
        student: the model.
        mb: the prepared micro-batch.
        counts: the whole step's normalisers.
        generator: the random position selector's generator.
        stored_teacher: (B, T, V) teacher logits from the step's offloaded teacher phase
            (``memory.offloaded_teacher_logits``), or None to run the teacher here.
    """
    method = cfg.method
    t_logits = None
    # The teacher goes first: the EMA swap writes the weights in place, which must not happen while the
    # student's autograd graph holds them.
    if stored_teacher is not None:
        t_logits = stored_teacher.to(student.model.device)
    elif method.objective in ("distill", "distill_sft"):
        twin = None
        if uses_copy(cfg.teacher_weights, student):
            twin = lambda: rollout_adapter(student, "copy", cfg.model.signal_chunk)  # noqa: E731
        view = (mb.teacher_encoded, mb.prefix.tokens, twin, mb.teacher_selections)
        t_logits = teacher_logits(student, method.teacher.kind, *view)
        if method.teacher.kind == "trust_region":  # lerp towards the current student's logits (spec §1.8)
            current = teacher_logits(student, "shared", *view)
            t_logits = trust_region_logits(t_logits, current, method.teacher.trust_region_lambda)
    ref_logp = None
    if method.objective == "rl" and method.rl.beta > 0:
        ref_logp = _reference_logprobs(cfg, student, mb)
    with mode(student.model, training=True), student.compute():
        batch = build_context(student.adapter, mb.encoded, mb.selections, mb.prefix.tokens)
        s_logits, _ = response_logits(student.adapter, batch)
    sensitivity = _probe_sensitivity(cfg, student, mb, s_logits) if method.positions.needs_probe else None
    selector = POSITION_SELECTORS.get(method.positions.name)
    scores = sensitivity
    if selector.score in ("teacher_divergence", "tip"):
        with torch.no_grad():
            scores = _divergence(cfg, s_logits.detach(), t_logits, mb.valid, mb.ids)
            if selector.score == "tip":  # Soft-OR of student entropy and this divergence (Xu et al. 2026)
                div = method.divergence
                scores = tip_scores(
                    s_logits, scores, mb.valid, chunk_size=div.chunk_size, temperature=div.temperature
                )
    selected = selector.select(mb.valid, scores, generator=generator, **method.positions.extra())
    if not torch.equal(selected.sum(dim=-1), mb.planned):
        raise RuntimeError(
            f"position selector {method.positions.name!r} picked {selected.sum(-1).tolist()}, "
            f"planned {mb.planned.tolist()}: the step's loss normaliser would be wrong"
        )
    extra: dict[str, float] = {}
    if method.objective == "sft":
        per_token = token_cross_entropy(s_logits, mb.ids, selected)
    elif method.objective == "rl":
        per_token, extra = _policy_loss(cfg, s_logits, mb, selected, ref_logp)
    elif method.objective == "distill_sft":  # EPIC: α·KL(teacher‖student) + (1 − α)·CE, same positions
        alpha = float(method.distill_weight)
        divergence = _divergence(cfg, s_logits, t_logits, selected, mb.ids)
        per_token = alpha * divergence + (1.0 - alpha) * token_cross_entropy(s_logits, mb.ids, selected)
    else:
        per_token = _divergence(cfg, s_logits, t_logits, selected, mb.ids)
    loss = _reduce(cfg, per_token, selected, counts)
    stats = micro_stats(mb, per_token, selected, sensitivity, loss, method.prefix == "rollout")
    return loss, {**stats, **extra}


def micro_stats(
    mb: MicroBatch, per_token: torch.Tensor, selected: torch.Tensor, sensitivity: torch.Tensor | None,
    loss: torch.Tensor, on_policy: bool,
) -> dict[str, float]:  # fmt: skip
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
        "graded": 0.0,
        "correct": 0.0,
    }
    if on_policy:
        stats["graded"] = float(len(mb.items))
        stats["correct"] = float(
            sum(is_correct(t, it) for t, it in zip(mb.prefix.texts, mb.items, strict=True))
        )
    return stats
