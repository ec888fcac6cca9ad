"""G rollouts per prompt, their rewards and advantages, and DAPO's dynamic sampling (``method.objective=rl``).

``prepare_groups`` replaces ``contexts.prepare_step`` for the policy-gradient methods. Per micro-batch it builds
the contexts once (one vision-tower run, ONE pruner selection per prompt), then repeats each prompt's
context G times, so the decode engine samples the G copies of every prompt of the step in one call.
``method.effective_batch_size`` and ``micro_batch_size`` count prompts; a micro-batch holds G× as many
rollouts, and a group never straddles micro-batches (its advantages are local).

Rollouts the loss must not see keep their rows but lose their mask (``valid`` False, no planned
positions): a group with an unscorable reference (counted and warned), a zero-variance group that dynamic
sampling could not replace, and under ``mask_truncated`` a rollout cut at ``max_new_tokens``.

With ``method.rl.num_iterations`` = μ > 1 (TRL's semantics) the rollouts of a generation step are reused on
the μ − 1 following optimizer steps: ``stored_rollouts`` keeps, per micro-batch, what cannot be rebuilt once
the weights moved (the prompts' positions, the rollouts' ids, texts and stopped flags, the loss mask, rewards
and advantages, and the old log-probabilities of the sampling policy) as plain CPU tensors and lists (the
resume state carries them); ``reused_groups`` rebuilds the contexts from the same items and positions (the
encoding and the pruner's seeded selection are deterministic) and attaches the stored rest.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from sparsectx.data import Item
from sparsectx.layer_selection import LayerSelection
from sparsectx.training.config import TrainConfig
from sparsectx.training.contexts import MicroBatch, MicroContexts, micro_contexts, repeat_context, step_prefixes
from sparsectx.training.prefetch import Batch, HostInputs
from sparsectx.training.rewards import REWARDS
from sparsectx.training.rl import GroupBatch, group_advantages, informative_groups, overlong_penalty
from sparsectx.training.rollout import Prefix
from sparsectx.training.student import Student
from sparsectx.visual import Selection

Draw = Callable[[int, int], Batch]
"""``draw(count, round)``: ``count`` new prompts (items, positions) for refill round ``round``."""


@dataclass
class Group:
    """One prompt's context (shared by its G rollouts) and the G rollouts with their rewards.

    Attributes:
        context: the prompt alone, as a one-sample ``MicroContexts``.
        prefix: its G rollouts.
        rewards: (G,) float64 rewards, or None when the reward could not score the item's reference.
    """

    context: MicroContexts
    prefix: Prefix
    rewards: torch.Tensor | None

    @property
    def informative(self) -> bool:
        """Whether the rewards are scorable and not all equal (the group carries a gradient signal)."""
        return self.rewards is not None and bool(informative_groups(self.rewards, self.rewards.numel())[0])


def split_prompts(context: MicroContexts) -> list[MicroContexts]:
    """Returns one single-prompt ``MicroContexts`` per prompt of ``context``."""
    probe = context.probe_selections
    return [
        MicroContexts(
            [context.items[i]],
            [context.positions[i]],
            [context.encoded[i]],
            [context.teacher_encoded[i]],
            [context.selections[i]],
            None if probe is None else [probe[i]],
        )
        for i in range(len(context.items))
    ]


def group_rewards(cfg: TrainConfig, prefix: Prefix, context: MicroContexts) -> torch.Tensor | None:
    """Returns (G,) float64 rewards of one prompt's rollouts (+ overlong penalty), or None if unscorable.

    Raises:
        ValueError: the reward returned a value that is not a finite number (names the item).
    """
    rl = cfg.method.rl
    item = context.items[0]
    values = REWARDS.get(rl.reward.name)(prefix.texts, [item] * len(prefix.texts), **rl.reward.params)
    if any(v is None for v in values):
        return None
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)]
    if bad:
        raise ValueError(
            f"reward {rl.reward.name!r} returned {bad[0]!r} for training item {item.index}: a reward must be "
            "a finite number (or None for an unscorable reference)"
        )
    rewards = torch.tensor(values, dtype=torch.float64)
    if rl.overlong_cache_fraction is not None:
        lengths = torch.tensor([t.numel() for t in prefix.tokens])
        rewards = rewards + overlong_penalty(lengths, cfg.max_new_tokens, rl.overlong_cache_fraction)
    return rewards


RolloutFn = Callable[[list[MicroContexts]], list[Group]]


def rollout_groups(
    cfg: TrainConfig, student: Student, contexts: list[MicroContexts], generator: torch.Generator
) -> list[Group]:
    """Returns one ``Group`` per prompt of ``contexts``: G sampled rollouts each, from ONE engine call."""
    size = cfg.method.rl.group_size
    prompts = [p for c in contexts for p in split_prompts(c)]
    prefixes = step_prefixes(cfg, student, [repeat_context(p, size) for p in prompts], generator)
    return [Group(p, x, group_rewards(cfg, x, p)) for p, x in zip(prompts, prefixes, strict=True)]


def refill(
    groups: list[Group], rollout: RolloutFn, contexts_of: Callable[[Batch], MicroContexts], draw: Draw, max_draws: int
) -> tuple[list[Group], int]:
    """Returns the groups with zero-variance slots refilled by informative new groups, and prompts drawn.

    DAPO's dynamic sampling (Yu et al. 2025, Eq. 11): each round draws as many new prompts as there are
    uninformative slots, rolls them out, and moves the informative groups into those slots, until every
    slot is informative or ``max_draws`` rounds have run. Slots still uninformative stay (the caller drops
    them from the loss), so the returned list always has the original length.
    """
    groups, drawn = list(groups), 0
    for round_ in range(max_draws):
        empty = [i for i, g in enumerate(groups) if not g.informative]
        if not empty:
            break
        fresh = [g for g in rollout([contexts_of(draw(len(empty), round_))]) if g.informative]
        drawn += len(empty)
        for slot, group in zip(empty, fresh, strict=False):
            groups[slot] = group
    return groups, drawn


def _micro_batch(cfg: TrainConfig, groups: list[Group], drawn: int) -> MicroBatch:
    """Returns the micro-batch of ``groups``: G rows per group, advantages and the masks of dropped rows."""
    rl, size = cfg.method.rl, cfg.method.rl.group_size
    context = repeat_context(_join([g.context for g in groups]), size)
    prefix = Prefix(
        [t for g in groups for t in g.prefix.tokens],
        [t for g in groups for t in g.prefix.texts],
        [s for g in groups for s in g.prefix.stopped],
    )
    ids, valid = prefix.padded()
    rewards = torch.cat([torch.zeros(size, dtype=torch.float64) if g.rewards is None else g.rewards for g in groups])
    advantages = group_advantages(rewards, size, scale=rl.scale_rewards, std=rl.std).float()
    keep = torch.tensor([g.informative or (g.rewards is not None and not rl.dynamic_sampling) for g in groups])
    keep = keep.repeat_interleave(size).to(valid.device)
    if rl.mask_truncated:
        keep = keep & torch.tensor(prefix.stopped, device=valid.device)
    valid = valid & keep[:, None]
    info = GroupBatch(
        rewards=rewards,
        advantages=advantages.to(valid.device),
        group_size=size,
        informative=sum(g.informative for g in groups),
        unscorable=sum(size for g in groups if g.rewards is None),
        drawn=drawn,
        dropped=sum(rl.dynamic_sampling and g.rewards is not None and not g.informative for g in groups),
    )
    return MicroBatch.of(context, prefix, ids, valid, valid.sum(dim=-1), group=info)


def _join(contexts: list[MicroContexts]) -> MicroContexts:
    """Returns the concatenation of single-prompt contexts."""
    cat = lambda field: [x for c in contexts for x in getattr(c, field)]  # noqa: E731
    probe = None if contexts[0].probe_selections is None else cat("probe_selections")
    return MicroContexts(
        cat("items"), cat("positions"), cat("encoded"), cat("teacher_encoded"), cat("selections"), probe
    )


def prepare_groups(
    cfg: TrainConfig,
    student: Student,
    batches: list[Batch],
    budget: float,
    generator: torch.Generator,
    hosts: list[HostInputs] | None = None,
    draw: Draw | None = None,
) -> list[MicroBatch]:
    """Returns the step's micro-batches of G-rollout groups (``contexts.prepare_step``'s policy-gradient twin).

    Args:
        batches: per micro-batch, its prompts (items) and their global sample positions.
        generator: the rollout sampler's generator (one stream for the step, refills included).
        hosts: per micro-batch, its already-built host inputs, or None.
        draw: new prompts for dynamic sampling's refills (needed when ``method.rl.dynamic_sampling``).
    """
    rl = cfg.method.rl
    hosts = hosts or [None] * len(batches)
    contexts = [micro_contexts(cfg, student, *batch, budget, host) for batch, host in zip(batches, hosts, strict=True)]
    groups = rollout_groups(cfg, student, contexts, generator)
    drawn = 0
    if rl.dynamic_sampling:
        if draw is None:
            raise RuntimeError("method.rl.dynamic_sampling needs a prompt source for its refills (draw)")
        groups, drawn = refill(
            groups,
            lambda cs: rollout_groups(cfg, student, cs, generator),
            lambda batch: micro_contexts(cfg, student, *batch, budget),
            draw,
            rl.max_draws,
        )
    unscorable = [g.context.items[0].index for g in groups if g.rewards is None]
    if unscorable:
        warnings.warn(
            f"reward {rl.reward.name!r} cannot score the reference of training items {unscorable}; their "
            "rollouts are left out of the loss (counted as rl/unscorable)",
            stacklevel=2,
        )
    per_micro = [len(items) for items, _ in batches]
    out, start = [], 0
    for j, count in enumerate(per_micro):
        out.append(_micro_batch(cfg, groups[start : start + count], drawn if j == 0 else 0))
        start += count
    return out


def stored_rollouts(micro: list[MicroBatch]) -> list[dict[str, Any]]:
    """Returns, per micro-batch, its rollouts for reuse (``reused_groups``) as plain CPU tensors and lists.

    Each micro-batch must have passed ``micro_loss`` (its ``old_logp`` set on the generation step).
    """
    out = []
    for mb in micro:
        group, size = mb.group, mb.group.group_size
        out.append(
            {
                "positions": mb.positions[::size],
                "items": [it.index for it in mb.items[::size]],
                "tokens": [t.cpu() for t in mb.prefix.tokens],
                "texts": list(mb.prefix.texts),
                "stopped": list(mb.prefix.stopped),
                "valid": mb.valid.cpu(),
                "old_logp": mb.old_logp.cpu(),
                "rewards": group.rewards.cpu(),
                "advantages": group.advantages.cpu(),
                "group_size": size,
                "informative": group.informative,
                "unscorable": group.unscorable,
                "dropped": group.dropped,
                "kept": _in_llm_kept(mb.selections[::size]),
            }
        )
    return out


def _in_llm_kept(selections: list[list[Selection]]) -> list[list[torch.Tensor]] | None:
    """Returns the CPU kept indices of in-LLM selections (they depend on the weights), else None: a pre-LLM
    choice is a function of the frozen vision features and the seed, so a reuse step makes it again."""
    if not any(isinstance(s, LayerSelection) for sel in selections for s in sel):
        return None
    return [[s.indices.cpu() for s in sel] for sel in selections]


def reused_groups(
    cfg: TrainConfig,
    student: Student,
    stored: list[dict[str, Any]],
    budget: float,
    item_at: Callable[[int], Item],
) -> list[MicroBatch]:
    """Returns the micro-batches of a reuse step: the stored rollouts on contexts rebuilt at the generation
    step's ``budget`` from the same items and positions (refilled prompts included); no generation.

    Its refill draws are 0 (they were counted on the generation step).

    Raises:
        RuntimeError: a stored position no longer names the stored training item.
    """
    out = []
    for entry in stored:
        items = [item_at(p) for p in entry["positions"]]
        if [it.index for it in items] != entry["items"]:
            raise RuntimeError(
                f"stored rollouts of items {entry['items']} at positions {entry['positions']} but the training "
                f"set now gives items {[it.index for it in items]}: the data changed under a resumed run"
            )
        size = entry["group_size"]
        kept = entry.get("kept")  # None: a pre-LLM choice (and states written before in-LLM pruners)
        c = repeat_context(micro_contexts(cfg, student, items, entry["positions"], budget, kept=kept), size)
        device = c.encoded[0].prompt_ids.device
        prefix = Prefix([t.to(device) for t in entry["tokens"]], list(entry["texts"]), list(entry["stopped"]))
        ids, _ = prefix.padded()
        valid = entry["valid"].to(device)
        info = GroupBatch(
            rewards=entry["rewards"],
            advantages=entry["advantages"].to(device),
            group_size=size,
            informative=entry["informative"],
            unscorable=entry["unscorable"],
            drawn=0,
            dropped=entry["dropped"],
        )
        old_logp = entry["old_logp"].to(device)
        out.append(MicroBatch.of(c, prefix, ids, valid, valid.sum(dim=-1), group=info, old_logp=old_logp))
    return out
