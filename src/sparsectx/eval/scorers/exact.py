"""Exact match for short answers and numbers (our synthetic counting / OCR / detail benchmarks; GQA).

``exact_match``: the prediction equals the reference or one of ``answers`` after lower-casing,
collapsing whitespace and dropping surrounding quotes and trailing periods.
``number_match``: prediction and reference each parse to one number (``parse_number``) and the
numbers are equal. Scale: percent of items.
``exact_match_vlmeval`` (GQA): VLMEvalKit's ``accuracy`` rule, which only strips and lower-cases
(``vlmeval_accuracy``); the synthetic benchmarks keep ``exact_match``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from sparsectx.eval.scorers.base import ScoredItem, count_missing, percent, squash
from sparsectx.eval.scorers.spec import ITEM_MEAN, ScorerSpec

VERSION_EXACT = 1
VERSION_NUMBER = 1

_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
# fmt: off
_WORDS = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty",
)
# fmt: on
_WORD_VALUES = {word: float(value) for value, word in enumerate(_WORDS)}


def normalize_short_answer(text: str) -> str:
    """Returns ``text`` lower-cased, whitespace-collapsed, without surrounding quotes or trailing periods."""
    return squash(text).strip("\"'`").rstrip(".").strip()


def parse_number(text: str | None) -> float | None:
    """Returns the single number in ``text`` (digits, or a number word zero-twenty), else ``None``.

    Thousands separators ("1,024") are removed first. Text holding no number or several different
    numbers gives ``None``, so "3 or 4" is not read as 3.
    """
    if text is None:
        return None
    plain = _THOUSANDS.sub("", normalize_short_answer(text))
    found = {float(match) for match in _NUMBER.findall(plain)}
    if not found:
        found = {_WORD_VALUES[word] for word in re.findall(r"[a-z]+", plain) if word in _WORD_VALUES}
    return found.pop() if len(found) == 1 else None


def is_exact_match_correct(item: ScoredItem) -> bool:
    """Returns whether the normalised prediction equals a normalised gold answer (``reference`` or ``answers``)."""
    return item.prediction is not None and normalize_short_answer(item.prediction) in {
        normalize_short_answer(gold) for gold in (item.reference, *item.answers)
    }


def score_exact_match(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns the percent of items whose normalised prediction equals a normalised gold answer.

    Reads ``reference`` and, if set, ``answers`` (more accepted answers). Keys: ``score``, ``n``,
    ``missing``.
    """
    hits = sum(is_exact_match_correct(item) for item in items)
    return {
        "score": percent(hits, len(items)),
        "n": float(len(items)),
        "missing": float(count_missing(items)),
    }


def gold_number(item: ScoredItem) -> float:
    """Returns the number of the item's reference; raises ``ValueError`` naming the item when it holds none."""
    gold = parse_number(item.reference)
    if gold is None:
        raise ValueError(f"number_match: item {item.id!r} has reference {item.reference!r}, not one number")
    return gold


def is_number_match_correct(item: ScoredItem) -> bool:
    """Returns whether prediction and reference each parse to one number (``parse_number``) and the two are equal
    (a reference without one number is never matched; the scorer refuses it)."""
    value, gold = parse_number(item.prediction), parse_number(item.reference)
    return value is not None and gold is not None and math.isclose(value, gold, rel_tol=1e-9, abs_tol=1e-9)


def score_number_match(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns the percent of items whose prediction parses to the reference's number.

    Reads ``reference`` (must parse to one number). Keys: ``score``, ``n``, ``missing``,
    ``unparsed`` (an answer with no single number in it).
    """
    hits = unparsed = 0
    for item in items:
        gold = gold_number(item)
        value = parse_number(item.prediction)
        unparsed += item.prediction is not None and value is None
        hits += value is not None and math.isclose(value, gold, rel_tol=1e-9, abs_tol=1e-9)
    return {
        "score": percent(hits, len(items)),
        "n": float(len(items)),
        "missing": float(count_missing(items)),
        "unparsed": float(unparsed),
    }


VERSION_EXACT_VLMEVAL = 1


def vlmeval_accuracy(prediction: str | None, golds: Sequence[str]) -> float:
    """Returns VLMEvalKit's ``accuracy`` hit of one prediction: the share of golds it equals.

    Rule (vlmeval/dataset/utils/vqa_eval.py ``process_line(method='accuracy')`` and
    ``hit_calculate``'s default branch, which GQA takes): each gold matches when
    ``gold.strip().lower() == prediction.strip().lower()``; the item's hit is the mean over its
    golds (1.0 or 0.0 for GQA's single answer). Nothing else is normalised: no trailing-period,
    quote or inner-space handling. ``None`` (a miss) gives 0.0.
    """
    if prediction is None:
        return 0.0
    pred = prediction.strip().lower()
    return sum(gold.strip().lower() == pred for gold in golds) / len(golds)


def is_exact_match_vlmeval_correct(item: ScoredItem) -> bool:
    """Returns whether the prediction hits a gold by VLMEvalKit's rule (``vlmeval_accuracy`` > 0)."""
    return vlmeval_accuracy(item.prediction, item.answers or (item.reference,)) > 0


def score_exact_match_vlmeval(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns the GQA score in percent by VLMEvalKit's exact-match rule (``vlmeval_accuracy``).

    Source: vlmeval/dataset/image_vqa.py ``ImageVQADataset.evaluate``, which scores GQA (and OCRVQA)
    with ``process_line(method='accuracy')`` and reports ``Overall = mean(hit) * 100``. The golds are
    ``answers`` when set (VLMEvalKit's list-valued ``answer``), else ``reference``. Keys: ``score``,
    ``n``, ``missing``. Remaining differences: VLMEvalKit also reports per ``split`` when its file
    has that column (ours do not carry it), and scores a missing prediction as the string ``"nan"``.
    RealWorldQA is multiple choice in VLMEvalKit (``mcq_vlmeval``), not this rule.
    """
    hits = sum(vlmeval_accuracy(item.prediction, item.answers or (item.reference,)) for item in items)
    return {
        "score": 100.0 * hits / len(items),
        "n": float(len(items)),
        "missing": float(count_missing(items)),
    }


SPECS = (
    ScorerSpec(
        name="exact_match",
        version=VERSION_EXACT,
        fn=score_exact_match,
        is_correct=is_exact_match_correct,
        resampling=ITEM_MEAN,
        needs=("reference",),
    ),
    ScorerSpec(
        name="number_match",
        version=VERSION_NUMBER,
        fn=score_number_match,
        is_correct=is_number_match_correct,
        resampling=ITEM_MEAN,
        needs=("reference",),
        rules={"reference": gold_number},
    ),
    ScorerSpec(
        name="exact_match_vlmeval",
        version=VERSION_EXACT_VLMEVAL,
        fn=score_exact_match_vlmeval,
        is_correct=is_exact_match_vlmeval_correct,
        resampling=ITEM_MEAN,
        needs=("reference",),
    ),
)
