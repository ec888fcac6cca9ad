"""LogicVista: the letters an answer names against the gold letters, as a set (several may be right).

Source: VLMEvalKit ``vlmeval/dataset/utils/logicvista.py`` ``LogicVista_auxeval`` (the hit) and
``evaluate_logicvista`` (``Overall`` = percent of rows hit), called from ``vlmeval/dataset/image_vqa.py``
``LogicVista.evaluate``. There, an LLM judge turns the model's output into the letters it chose (upper-case
letters only, e.g. ``"AC"``; anything else is retried, then a miss), and a row is hit when those letters,
lower-cased and sorted, equal the gold cell split on ``", "``, lower-cased and sorted: ``"A, C"`` is hit
by ``"CA"`` and by ``"AC"``, not by ``"A"``.

The judge's step is the project's rule-based reading (``letter_set``): the extracted answer is read as
letters when, after dropping ``( ) [ ] .`` and the separators ``,`` ``;`` ``/`` ``&`` ``and`` and spaces,
only upper-case letters are left (``"A"``, ``"(B)"``, ``"A, C"``, ``"A and C"``, ``"AC"``); anything else
is unreadable (``None``) and wrong. VLMEvalKit's ``exact_matching`` mode has no reading at all
(``LogicVista.evaluate`` returns nothing without a judge), so only the hit rule is VLMEvalKit's.

Scale: percent of rows hit. Categories: VLMEvalKit also reports each skill (``skill`` cells matched by
substring); ``score`` is the ``Overall`` row.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sparsectx.eval.scorers.base import ScoredItem, accuracy_metrics
from sparsectx.eval.scorers.spec import ITEM_MEAN, ScorerSpec, VlmevalReading

VERSION = 1

_NOISE = re.compile(r"[()\[\].,;/&\s]+|\band\b")
_LETTERS = re.compile(r"^[A-Z]+$")


def letter_set(prediction: str | None) -> str | None:
    """Returns the letters an answer names, sorted (``"A, C"`` -> ``"AC"``), or ``None`` when it names none."""
    if prediction is None:
        return None
    letters = _NOISE.sub("", prediction.strip())
    return "".join(sorted(letters)) if _LETTERS.match(letters) else None


def gold_letters(item: ScoredItem) -> str:
    """Returns the gold cell's letters sorted, as ``LogicVista_auxeval`` splits it on ``", "``.

    Raises ``ValueError`` naming the item when the cell is not upper-case letters joined by ``", "``.
    """
    parts = item.reference.split(", ")
    if not all(_LETTERS.match(part) for part in parts):
        raise ValueError(
            f"logicvista: item {item.id!r} has reference {item.reference!r}; expected option letters joined "
            "by ', ' (e.g. 'D' or 'A, C')"
        )
    return "".join(sorted("".join(parts)))


def is_logicvista_correct(item: ScoredItem) -> bool:
    """Returns whether the letters ``item.prediction`` names are the gold letters (order ignored)."""
    return letter_set(item.prediction) == gold_letters(item)


def score_logicvista(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns LogicVista accuracy in percent (``score``, VLMEvalKit's ``Overall``).

    Reads ``reference`` (gold letters, ``", "``-joined). Keys: ``score``, ``n``, ``missing``, ``unread``
    (an extracted answer that names no letters).
    """
    correct = [is_logicvista_correct(item) for item in items]
    unread = sum(item.prediction is not None and letter_set(item.prediction) is None for item in items)
    return accuracy_metrics(items, correct, "unread", unread)


SPECS = (
    ScorerSpec(
        name="logicvista",
        version=VERSION,
        fn=score_logicvista,
        is_correct=is_logicvista_correct,
        resampling=ITEM_MEAN,  # evaluate_logicvista's Overall
        needs=("reference",),
        rules={"reference": gold_letters},
        vlmeval=VlmevalReading(
            ("question", "answer", "skill"),
            lambda m: m["Overall/acc"],
            "score",
            "evaluate_logicvista Overall acc (judge-extracted letters)",
        ),
    ),
)
