"""Multiple-choice letter matching and plain MCQ accuracy (MMStar, MMMU-Pro, BLINK, CV-Bench, ...).

Scale: percent of questions whose matched letter equals the gold letter, the metric these
benchmarks define (e.g. MMStar, Chen et al. 2024, §4). Matching is rule-based (VLMEvalKit's
``--judge exact_matching`` mode, not an LLM judge); the rules are in ``match_choice``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from sparsectx.eval.scorers.base import (
    ScoredItem,
    accuracy_metrics,
    check_items,
    register_scorer,
    squash,
)

VERSION = 1

_LEADING = re.compile(r"^[(\[]?([A-Z])[)\]]?(?:$|[.:,)\]])")
_LONE_LOWER = re.compile(r"^[(\[]?([a-z])[)\]]?\.?$")
_CUE = re.compile(r"(?:answer|option|choice)\s*(?:is|:)?\s*:?\s*[(\[]?([A-Z])(?![A-Za-z])", re.IGNORECASE)
_STANDALONE = re.compile(r"(?<![A-Za-z])([A-Z])(?![A-Za-z])")
_AS_WORD = re.compile(r" (?!(?:or|and|is|was|seems|would|could|should|might|must)\b)[a-z]")


def _unique(candidates: set[str]) -> str | None:
    return next(iter(candidates)) if len(candidates) == 1 else None


def _standalone_letters(text: str, letters: set[str]) -> set[str]:
    found = set()
    for match in _STANDALONE.finditer(text):
        letter = match.group(1)
        # "A dog ..." and "I think ..." use A and I as words; "A or B", "A is right" use them as letters.
        if letter in {"A", "I"} and _AS_WORD.match(text, match.end()):
            continue
        if letter in letters:
            found.add(letter)
    return found


def match_choice(prediction: str | None, options: Mapping[str, str]) -> str | None:
    """Returns the option letter a prediction names, or ``None`` when no rule gives a unique letter.

    Rules, first that applies wins: (1) the prediction equals one option's text (case and space
    insensitive); (2) it starts with a letter, bare or as ``(B)``, ``B.``, ``B:``, or is a single
    lower-case letter; (3) the last "answer/option/choice (is) X" cue; (4) exactly one option letter
    stands alone in the text (``A``/``I`` followed by a lower-case word other than a connective
    or verb such as "or"/"is" are read as words);
    (5) exactly one option text occurs as whole words. Letters must be keys of ``options``.

    Args:
        prediction: Extracted answer; ``None`` (an extraction miss) gives ``None``.
        options: Option letter -> option text.
    """
    if prediction is None or not options:
        return None
    letters = {letter.upper() for letter in options}
    text = prediction.strip()
    plain = squash(text).rstrip(".")
    by_text = {letter.upper() for letter, option in options.items() if squash(option).rstrip(".") == plain}
    if len(by_text) == 1:
        return by_text.pop()
    for pattern in (_LEADING, _LONE_LOWER):
        match = pattern.match(text)
        if match and match.group(1).upper() in letters:
            return match.group(1).upper()
    cues = [m.group(1).upper() for m in _CUE.finditer(text) if m.group(1).upper() in letters]
    if cues:
        return cues[-1]
    alone = _unique(_standalone_letters(text, letters))
    if alone is not None:
        return alone
    contained = {
        letter.upper()
        for letter, option in options.items()
        if squash(option) and re.search(rf"(?<!\w){re.escape(squash(option))}(?!\w)", squash(text))
    }
    return _unique(contained)


def is_choice_correct(item: ScoredItem) -> bool:
    """Returns whether ``item.prediction`` matches the gold letter ``item.reference``."""
    return match_choice(item.prediction, item.options) == item.reference.strip().upper()


@register_scorer("mcq", VERSION)
def score_mcq(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns MCQ accuracy in percent (``score``), per-category accuracy and miss counts.

    Reads ``reference`` (gold letter), ``options`` and, if set, ``category``. Keys: ``score``,
    ``n``, ``missing`` (no extracted answer), ``unmatched`` (an answer naming no unique option),
    ``category/<name>``.
    """
    check_items(items, "mcq", needs=("reference", "options"))
    correct = [is_choice_correct(item) for item in items]
    unmatched = sum(
        item.prediction is not None and match_choice(item.prediction, item.options) is None for item in items
    )
    return accuracy_metrics(items, correct, "unmatched", unmatched)
