"""Rewards of the policy-gradient methods (GRPO / GSPO / DAPO): one number per rollout, from the item's reference.

A reward is a function ``(texts, items, **params) -> list[float | None]``: one value per rollout, or ``None``
when the item's reference cannot be scored (the caller counts and reports those, and never trains on them
as a silent 0). It is filed in ``REWARDS`` under the key ``method.rl.reward.name`` names, with its keyword
arguments from ``method.rl.reward.params``, so a judge model can replace the rule-based reward: ``judge_format``
(``sparsectx.training.judge_reward``, ``method=grpo_judge``) asks a chat model instead of the benchmark scorer.
A reward may file a check of its params in ``REWARD_CHECKS``, run when the config loads (before any model).

``correct_format`` (training-methods spec §5.4, the SCOPD authors' TRL GRPO: ``1·correct + 0.1·format``):

- correct: the rollout's strict ``<answer>`` (``sparsectx.eval.extract``, as the benchmarks extract it) is
  scored by the benchmark scorer of the item's kind: ``mcq`` (option matching, ``match_choice``) when the
  item has options, ``exact_match`` (normalised short-answer equality) otherwise. A reference the scorer
  rejects (empty, or an MCQ answer that is not one of the option letters) makes the item unscorable.
- format: the text is one ``<think>…</think>`` block followed by one ``<answer>…</answer>`` block
  ([UNVERIFIED] our reading of "format": the training prompt's instruction asks for exactly this).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sparsectx.data import Item
from sparsectx.eval.extract import extract_answer
from sparsectx.eval.scorers import ScoredItem, score_items
from sparsectx.registry import Registry

RewardFn = Callable[..., list[float | None]]
REWARDS: Registry[RewardFn] = Registry("reward")
REWARD_CHECKS: dict[str, Callable[[Mapping[str, Any]], None]] = {}
"""Reward name -> a check of its ``params`` beyond their names (``RewardConfig`` runs it); raises on bad values."""

_FORMAT = re.compile(r"\s*<think>.*?</think>\s*<answer>.*?</answer>\s*", re.IGNORECASE | re.DOTALL)


def scorer_for(item: Item) -> str:
    """Returns the benchmark scorer key that judges ``item``: ``mcq`` with options, else ``exact_match``."""
    return "mcq" if item.options else "exact_match"


def scorable(item: Item) -> bool:
    """Returns whether ``item``'s reference can be scored (non-empty; an option letter for MCQ)."""
    reference = item.answer.strip()
    if not reference:
        return False
    return not item.options or reference.upper() in {letter.upper() for letter in item.options}


def is_answer_correct(text: str, item: Item) -> bool:
    """Returns whether the strict ``<answer>`` of ``text`` scores full marks under ``scorer_for(item)``."""
    scored = ScoredItem(
        id=str(item.index),
        prediction=extract_answer(text).strict,
        reference=item.answer.strip(),
        options=dict(item.options),
    )
    return score_items(scorer_for(item), [scored]).metrics["score"] == 100.0


def has_format(text: str) -> bool:
    """Returns whether ``text`` is one ``<think>`` block followed by one ``<answer>`` block."""
    return _FORMAT.fullmatch(text) is not None


@REWARDS.register("correct_format")
def correct_format_reward(
    texts: Sequence[str], items: Sequence[Item], *, correct_weight: float, format_weight: float
) -> list[float | None]:
    """Returns ``correct_weight·correct + format_weight·format`` per rollout; None for an unscorable item.

    Args:
        texts: the decoded rollouts (special tokens removed).
        items: the training item of each rollout (same length).
        correct_weight: weight of the benchmark-scorer correctness (1.0 in the SCOPD authors' GRPO).
        format_weight: weight of the think/answer format check (0.1 there).
    """
    out: list[float | None] = []
    for text, item in zip(texts, items, strict=True):
        if not scorable(item):
            out.append(None)
            continue
        out.append(correct_weight * is_answer_correct(text, item) + format_weight * has_format(text))
    return out


from sparsectx.training import judge_reward  # noqa: E402, F401  (registers judge_format; it imports this module)
