"""One step's inputs: each micro-batch's contexts from one encoding, then one prefix call for the whole step.

``prepare_step`` runs without gradients: per micro-batch, encode the prompts once (vision tower once), select
the student's tokens at budget b (and b+δ for the sensitivity probe, and the teacher's own milder budget for
EPIC) and build the teacher's prompt; then one prefix call serves the whole step (all rollouts decode
together). The loss on these inputs is ``sparsectx.training.steps``.

With ``method.rollouts_per_prompt`` = k > 1 each prompt's contexts are repeated k times in a row
(``repeat_context``: the same encoding and selection objects), so the one prefix call samples k rollouts of
every prompt from the step's generator and a micro-batch of ``micro_batch_size`` prompts holds k times as
many sequences, each a sequence of the loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from sparsectx.context import keep_all
from sparsectx.data import Item
from sparsectx.encoding import EncodedSample, encode_samples
from sparsectx.layer_selection import LayerSelection
from sparsectx.pruning import select_tokens
from sparsectx.pruning.layer import restore_selections, select_in_llm
from sparsectx.seeding import derive_seed
from sparsectx.training.batches import reencode_text, with_reference
from sparsectx.training.config import TrainConfig
from sparsectx.training.positions import positions_per_sequence
from sparsectx.training.prefetch import Batch, HostInputs, host_inputs
from sparsectx.training.rl import GroupBatch
from sparsectx.training.rollout import PREFIX_SOURCES, Prefix, PrefixInputs
from sparsectx.training.student import Student
from sparsectx.training.vision_training import VisionInputs
from sparsectx.visual import Selection


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
    vision: VisionInputs | None = field(default=None, kw_only=True)
    """The micro-batch's pixels when the tower trains (``method.train_vision``), else None."""


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

    @classmethod
    def of(
        cls,
        c: MicroContexts,
        prefix: Prefix,
        ids: torch.Tensor,
        valid: torch.Tensor,
        planned: torch.Tensor,
        **rl: object,
    ) -> MicroBatch:
        """Returns the micro-batch of contexts ``c`` with its prefix (``rl``: ``group`` and ``old_logp``)."""
        return cls(
            c.items,
            c.positions,
            c.encoded,
            c.teacher_encoded,
            c.selections,
            c.probe_selections,
            prefix,
            ids,
            valid,
            planned,
            teacher_selections=c.teacher_selections,
            vision=c.vision,
            **rl,
        )


def repeat_context(context: MicroContexts, times: int) -> MicroContexts:
    """Returns ``context`` with every prompt repeated ``times`` times in a row (the same encoding and selection
    objects); the pixels are not copied: ``VisionInputs.repeats`` tells the tower passes that rows share them."""
    rep = lambda xs: None if xs is None else [x for x in xs for _ in range(times)]  # noqa: E731
    vision = context.vision
    return MicroContexts(
        rep(context.items),
        rep(context.positions),
        rep(context.encoded),
        rep(context.teacher_encoded),
        rep(context.selections),
        rep(context.probe_selections),
        teacher_selections=rep(context.teacher_selections),
        vision=None if vision is None else replace(vision, repeats=vision.repeats * times),
    )


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
    embeds = take(inner.embeds, outer.embeds)
    if isinstance(inner, LayerSelection):  # an in-LLM probe drops before the same layer K
        return LayerSelection(unique, embeds, deepstack, layer=inner.layer)
    return Selection(indices=unique, embeds=embeds, deepstack=deepstack)


def select_images(cfg: TrainConfig, sample: EncodedSample, budget: float, position: int) -> list[Selection]:
    """Returns the pruner's selection of each image of ``sample`` at ``budget``, seeded per (position, image).

    The same seed serves b and b+δ, so a pruner that draws a permutation (random) is nested by construction.
    """
    out = []
    for index, image in enumerate(sample.images):
        generator = torch.Generator().manual_seed(derive_seed(cfg.seed, "prune", position, index))
        out.append(select_tokens(cfg.pruner.name, image, sample.question_embeds, budget, generator, cfg.pruner.params))
    return out


def select_batch(
    cfg: TrainConfig,
    student: Student,
    samples: list[EncodedSample],
    budget: float,
    positions: list[int],
    layer: int | None = None,
) -> list[list[Selection]]:
    """Returns per sample its per-image selections at ``budget``: ``select_images`` for a pre-LLM pruner,
    ``select_in_llm`` over the micro-batch's prompts (the current weights' layer K-1) for an in-LLM one, at
    ``layer`` (this step's K of ``method.layer_schedule``) or else ``pruner.layer``. K = the LLM's depth drops
    nothing (EPIC's LCD compresses "at layer L" first, arXiv 2510.00515 Eq. 9): every token is kept."""
    pruner = cfg.pruner
    if pruner.stage == "llm":
        layer = pruner.layer if layer is None else layer
        if layer >= student.model.config.get_text_config().num_hidden_layers:
            return [keep_all(s) for s in samples]
        return select_in_llm(student.adapter, samples, pruner.name, budget, pruner.params, layer)
    return [select_images(cfg, s, budget, p) for s, p in zip(samples, positions, strict=True)]


def probe_batch(
    cfg: TrainConfig,
    student: Student,
    samples: list[EncodedSample],
    inner: list[list[Selection]],
    budget: float,
    positions: list[int],
    layer: int | None = None,
) -> list[list[Selection]]:
    """Returns per sample the per-image selections of the b+δ probe (``method.positions.probe_nesting``), at
    the step's in-LLM ``layer`` (None: ``pruner.layer``)."""
    outer = select_batch(cfg, student, samples, min(1.0, budget + float(cfg.method.positions.delta)), positions, layer)
    if cfg.method.positions.probe_nesting == "recompute":
        return outer
    return [
        [nested_union(a, b) for a, b in zip(ins, outs, strict=True)] for ins, outs in zip(inner, outer, strict=True)
    ]


def planned_counts(valid: torch.Tensor, cfg: TrainConfig) -> torch.Tensor:
    """Returns (B,) int64 k_i, the positions the selector will pick per sequence (known before forwards)."""
    fraction = cfg.method.positions.fraction
    if fraction is None:
        return valid.sum(dim=-1)
    return positions_per_sequence(valid, fraction)


def micro_contexts(
    cfg: TrainConfig,
    student: Student,
    items: list[Item],
    positions: list[int],
    budget: float,
    host: HostInputs | None = None,
    teacher_budget: float | None = None,
    kept: list[list[torch.Tensor]] | None = None,
    layer: int | None = None,
) -> MicroContexts:
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
        kept: per sample, per image, the kept indices of an earlier in-LLM selection to reuse (a reuse step's
            stored rollouts, ``training.groups``: the weights moved since, so selecting again would differ);
            None = select now.
        layer: this step's in-LLM pruning layer K for the student, the probe and the teacher alike
            (``method.layer_schedule``, EPIC's LCD: one layer for both, arXiv 2510.00515 Eq. 12), or None for
            ``pruner.layer``.
    """
    method = cfg.method
    if host is None:
        host = host_inputs(cfg, student.processor, (items, positions), pin=False)
    prompts = host.prompts
    with torch.no_grad():
        encoded = encode_samples(student.adapter, student.processor, prompts, host.batch)
        if kept is None:
            selections = select_batch(cfg, student, encoded, budget, positions, layer)
        else:
            selections = restore_selections(encoded, kept, cfg.pruner.layer)
        probe = None
        if method.positions.needs_probe:
            probe = probe_batch(cfg, student, encoded, selections, budget, positions, layer)
        teacher_encoded = encoded
        if method.teacher.reference_in_prompt:
            template = method.teacher.reference_template
            teacher_encoded = [
                reencode_text(student.adapter, student.processor, with_reference(pr, it, template), s)
                for pr, it, s in zip(prompts, items, encoded, strict=True)
            ]
        teacher_selections = None
        if teacher_budget is not None:
            teacher_selections = select_batch(cfg, student, encoded, teacher_budget, positions, layer)
    return MicroContexts(
        items,
        positions,
        encoded,
        teacher_encoded,
        selections,
        probe,
        teacher_selections=teacher_selections,
        vision=step_vision(host, student) if method.train_vision else None,
    )


def step_vision(host: HostInputs, student: Student) -> VisionInputs:
    """Returns the micro-batch's image pixels on the model's device, for the tower's passes with gradients."""
    batch = host.batch
    if "pixel_values_videos" in batch:
        raise ValueError("method.train_vision=true trains on images; this training batch holds videos")
    device = student.model.device
    return VisionInputs(batch["pixel_values"].to(device), batch["image_grid_thw"].to(device))


def step_prefixes(
    cfg: TrainConfig, student: Student, contexts: list[MicroContexts], generator: torch.Generator
) -> list[Prefix]:
    """Returns each micro-batch's prefix from ONE prefix-source call over the whole step.

    Rollouts of every micro-batch decode together (``rollout_batch_size`` at a time, default all), so the
    engine's batch is the step, not the micro-batch; ``micro_batch_size`` only sizes the gradient passes.
    """
    joined = lambda field: [x for c in contexts for x in getattr(c, field)]  # noqa: E731
    inputs = PrefixInputs(
        student,
        joined("items"),
        joined("encoded"),
        joined("selections"),
        cfg.method.rollout.sampling(cfg.max_new_tokens),
        generator,
        cfg.engine,
        cfg.rollout_batch_size,
        cfg.rollout_weights,
    )
    prefix = PREFIX_SOURCES.get(cfg.method.prefix)(inputs)
    out, start = [], 0
    for c in contexts:
        end = start + len(c.items)
        out.append(Prefix(prefix.tokens[start:end], prefix.texts[start:end], prefix.stopped[start:end]))
        start = end
    return out


def prepare_step(
    cfg: TrainConfig,
    student: Student,
    batches: list[Batch],
    budget: float,
    generator: torch.Generator,
    hosts: list[HostInputs] | None = None,
    teacher_budget: float | None = None,
    layer: int | None = None,
) -> list[MicroBatch]:
    """Returns the step's micro-batches: contexts per micro-batch, then one prefix call for all of them.

    Each prompt's contexts are built once and repeated ``method.rollouts_per_prompt`` times, one row per rollout.

    Args:
        batches: per micro-batch, its items and their global sample positions.
        generator: the rollout sampler's generator (one stream for the step).
        hosts: per micro-batch, its already-built host inputs (``training.prefetch``), or None.
        teacher_budget: the teacher's own budget this step, or None for the full visual context.
        layer: this step's in-LLM pruning layer K (``method.layer_schedule``), or None for ``pruner.layer``.
    """
    hosts = hosts or [None] * len(batches)
    rollouts = cfg.method.rollouts_per_prompt
    contexts = [
        repeat_context(
            micro_contexts(cfg, student, items, positions, budget, host, teacher_budget, layer=layer), rollouts
        )
        for (items, positions), host in zip(batches, hosts, strict=True)
    ]
    micro = []
    for c, prefix in zip(contexts, step_prefixes(cfg, student, contexts, generator), strict=True):
        ids, valid = prefix.padded()
        micro.append(MicroBatch.of(c, prefix, ids, valid, planned_counts(valid, cfg)))
    return micro
