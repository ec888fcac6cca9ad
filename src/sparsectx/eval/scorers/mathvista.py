"""MathVista (testmini): VLMEvalKit's rule-based check of an answer, ``post_check``.

Source: VLMEvalKit ``vlmeval/dataset/utils/mathvista.py``: ``post_check`` (with ``prefetch=True``, the rule
``MathVista_auxeval`` tries before its LLM judge) and ``MathVista_acc`` (``Overall`` = percent of rows hit),
called from ``vlmeval/dataset/image_vqa.py`` ``MathVista.evaluate``.

- A multiple-choice row (options from the file's ``choices`` list, gold = ``answer_option``, its letter): the
  letter ``can_infer`` reads from the answer, unstripped as ``post_check`` passes it (``vlmeval_choice``
  with ``strip=False``), equals the gold letter. Comparing the answer with the ``answer`` cell, the option's
  text, would score a right letter 0.
- A free-form row: ``post_check`` compares ``int``s when the answer type is integer and ``float``s when it is
  float; the project reads the type from the gold cell (an integer cell compares as ``int``, another number
  as ``float``). A text or list answer is matched by VLMEvalKit's judge only (its rule compares
  ``str(None)``); here it is right when equal to the gold after stripping and lower-casing, a stricter reading
  than a judge's.

Scale: percent of rows hit.
"""

from __future__ import annotations

from collections.abc import Sequence

from sparsectx.eval.scorers.base import ScoredItem, accuracy_metrics
from sparsectx.eval.scorers.mcq import vlmeval_choice
from sparsectx.eval.scorers.spec import ITEM_MEAN, ScorerSpec, VlmevalReading

VERSION = 1


def _number(text: str, kind: type) -> int | float | None:
    try:
        return kind(text.strip())
    except ValueError:
        return None


def is_mathvista_correct(item: ScoredItem) -> bool:
    """Returns whether the answer of one MathVista row is right by ``post_check``'s rule (module doc)."""
    if item.prediction is None:
        return False
    if item.options:
        return vlmeval_choice(item.prediction, item.options, strip=False) == item.reference
    for kind in (int, float):
        gold = _number(item.reference, kind)
        if gold is not None:
            return _number(item.prediction, kind) == gold
    return item.prediction.strip().lower() == item.reference.strip().lower()


def score_mathvista(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns MathVista accuracy in percent (``score``, VLMEvalKit's ``Overall``).

    Reads ``reference`` (the gold letter on a multiple-choice row, else the answer) and ``options``. Keys:
    ``score``, ``n``, ``missing``, ``unread`` (a multiple-choice answer in which no option can be read).
    """
    correct = [is_mathvista_correct(item) for item in items]
    unread = sum(
        item.prediction is not None
        and bool(item.options)
        and vlmeval_choice(item.prediction, item.options, False) is None
        for item in items
    )
    return accuracy_metrics(items, correct, "unread", unread)


SPECS = (
    ScorerSpec(
        name="mathvista",
        version=VERSION,
        fn=score_mathvista,
        is_correct=is_mathvista_correct,
        resampling=ITEM_MEAN,  # MathVista_acc's Overall
        needs=("reference",),
        vlmeval=VlmevalReading(
            ("question", "answer", "question_type", "answer_type", "choices", "answer_option", "task", "skills"),
            lambda m: m["Overall/acc"],
            "score",
            "MathVista_acc Overall acc (judge-extracted answers)",
        ),
    ),
)
