"""Yes/no answer parsing and accuracy (HallusionBench-style question accuracy; shared by MME and POPE).

Scale: percent of questions answered with the gold yes/no.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sparsectx.eval.scorers.base import (
    ScoredItem,
    accuracy_metrics,
    check_items,
    register_scorer,
)

VERSION = 1

_WORD = re.compile(r"[a-z]+")


def parse_yes_no(prediction: str | None) -> str | None:
    """Returns ``"yes"``, ``"no"`` or ``None`` (unreadable or both words present) for a prediction.

    The first word decides when it is "yes" or "no"; otherwise the answer is the one of the two
    words that occurs (``None`` when both or neither occur). "not" is not read as "no".
    """
    if prediction is None:
        return None
    words = _WORD.findall(prediction.lower())
    if not words:
        return None
    if words[0] in ("yes", "no"):
        return words[0]
    has_yes, has_no = "yes" in words, "no" in words
    if has_yes != has_no:
        return "yes" if has_yes else "no"
    return None


def gold_yes_no(item: ScoredItem, scorer: str) -> str:
    """Returns the item's reference as ``"yes"``/``"no"``; raises ``ValueError`` for anything else."""
    gold = item.reference.strip().lower()
    if gold not in ("yes", "no"):
        raise ValueError(
            f"{scorer}: item {item.id!r} has reference {item.reference!r}; expected 'yes' or 'no'"
        )
    return gold


@register_scorer("yes_no", VERSION)
def score_yes_no(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns yes/no accuracy in percent (``score``), ``n``, ``missing``, ``unparsed``, per category."""
    check_items(items, "yes_no", needs=("reference",))
    correct = [parse_yes_no(item.prediction) == gold_yes_no(item, "yes_no") for item in items]
    unparsed = sum(it.prediction is not None and parse_yes_no(it.prediction) is None for it in items)
    return accuracy_metrics(items, correct, "unparsed", unparsed)
