"""Multiple-choice letter matching and MCQ accuracy: our own rules and VLMEvalKit's exact matching.

Scale: percent of questions whose matched letter equals the gold letter, the metric these
benchmarks define (e.g. MMStar, Chen et al. 2024, §4). Two rule sets, both rule-based (no judge):

* ``mcq`` (``match_choice``): our own, more permissive rules, kept for the synthetic benchmarks
  and the training rewards.
* ``mcq_vlmeval`` (``vlmeval_choice``): VLMEvalKit's ``--judge exact_matching`` mode transcribed
  from vlmeval/utils/matching_util.py ``can_infer`` (``can_infer_option`` then ``can_infer_text``);
  the real benchmarks (MMStar, MMMU, BLINK, CV-Bench, HRBench, ...) use it so that their numbers are
  VLMEvalKit's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from sparsectx.eval.scorers.base import ScoredItem, accuracy_metrics, squash
from sparsectx.eval.scorers.spec import ITEM_MEAN, JudgedAnswers, ScorerSpec, VlmevalReading

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


def score_mcq(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns MCQ accuracy in percent (``score``), per-category accuracy and miss counts.

    Reads ``reference`` (gold letter), ``options`` and, if set, ``category``. Keys: ``score``,
    ``n``, ``missing`` (no extracted answer), ``unmatched`` (an answer naming no unique option),
    ``category/<name>``.
    """
    correct = [is_choice_correct(item) for item in items]
    unmatched = sum(
        item.prediction is not None and match_choice(item.prediction, item.options) is None for item in items
    )
    return accuracy_metrics(items, correct, "unmatched", unmatched)


# --- VLMEvalKit's exact-matching rules (``--judge exact_matching``), for the real benchmarks -------------

VERSION_VLMEVAL = 1

VLMEVAL_REJECTIONS = (
    "Sorry, I can't help with images of people yet.",
    "I can't process this file.",
    "I'm sorry, but without the image provided",
    "Cannot determine the answer",
)
"""Refusals VLMEvalKit reads as the "no answer" letter ``Z`` (``can_infer_option``)."""
_VLMEVAL_SEPARATORS = str.maketrans({ch: " " for ch in ".()[],:;!*#{}"})


def vlmeval_infer_option(answer: str, options: Mapping[str, str]) -> str | None:
    """Returns the letter VLMEvalKit's ``can_infer_option`` reads, ``"Z"`` for a refusal, else ``None``.

    Rule (vlmeval/utils/matching_util.py ``can_infer_option``): the marks ``.()[],:;!*#{}`` become
    spaces and the text is split on whitespace; if exactly one option letter (upper case, as a whole
    token) occurs, it is the answer provided its first occurrence is among the last four tokens
    (``index > len(tokens) - 5``); if no letter occurs but the token ``Z`` does, the answer is ``Z``.
    A known refusal sentence gives ``Z``; ``'Failed to obtain answer via API'`` gives nothing.
    """
    if "Failed to obtain answer via API" in answer:
        return None
    if any(text in answer for text in VLMEVAL_REJECTIONS):
        return "Z"
    tokens = answer.translate(_VLMEVAL_SEPARATORS).split()
    present = [letter for letter in options if letter in tokens]
    if len(present) == 1:
        return present[0] if tokens.index(present[0]) > len(tokens) - 5 else None
    if not present and "Z" in tokens:
        return "Z"
    return None


def vlmeval_infer_text(answer: str, options: Mapping[str, str]) -> str | None:
    """Returns the letter whose option text VLMEvalKit's ``can_infer_text`` finds in ``answer``, else ``None``.

    Rule (vlmeval/utils/matching_util.py ``can_infer_text``): an answer longer than twice the total
    length of the option texts gives nothing; otherwise the lower-cased option texts that are
    substrings of the lower-cased answer (no word boundaries) are collected, and exactly one is needed.
    """
    low = answer.lower()
    if len(low) > 2 * sum(len(str(text)) for text in options.values()):
        return None
    found = [letter for letter, text in options.items() if str(text).lower() in low]
    return found[0] if len(found) == 1 else None


def vlmeval_choice(prediction: str | None, options: Mapping[str, str], strip: bool = True) -> str | None:
    """Returns the option VLMEvalKit's exact matching reads in a prediction (``can_infer``), else ``None``.

    The prediction is stripped (``extract_answer_from_item``; ``strip=False`` for the circular
    pre-fetch ``prefetch_answer``, which does not strip), then ``vlmeval_infer_option`` and,
    when it gives nothing, ``vlmeval_infer_text``. ``"Z"`` (a refusal) is returned as VLMEvalKit
    returns it and never equals a gold letter. ``None`` (extraction miss) gives ``None``; VLMEvalKit
    would score ``str(None)`` = ``"None"``, which also matches nothing unless an option's text is in it.
    """
    if prediction is None or not options:
        return None
    text = prediction.strip() if strip else prediction
    return vlmeval_infer_option(text, options) or vlmeval_infer_text(text, options)


def is_choice_correct_vlmeval(item: ScoredItem) -> bool:
    """Returns whether VLMEvalKit's exact matching reads the gold letter in ``item.prediction`` (``hit``)."""
    return vlmeval_choice(item.prediction, item.options) == item.reference.strip()


def score_mcq_vlmeval(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns MCQ accuracy in percent by VLMEvalKit's exact-matching rules (``vlmeval_choice``).

    Item rule: vlmeval/dataset/utils/multiple_choice.py ``extract_answer_from_item`` (with
    ``model=None``: ``can_infer`` or ``Z``) and ``eval_vanilla`` (``hit = opt == GT``).
    Aggregate: ``report_acc`` in the same file: ``Overall`` is the mean hit, and each ``category``
    gets its own mean (``category/<name>``). Reads ``reference`` (gold letter, compared as written,
    as ``GT`` is), ``options``, and ``category`` if set. Keys: ``score``, ``n``, ``missing``,
    ``unmatched`` (an extracted answer in which no option is read; VLMEvalKit's ``Z``), ``category/<name>``.

    Remaining differences from VLMEvalKit, each with its source:

    * HRBench's cycle average (``report_acc_hrbench``) and MMMU's open questions (``MMMU_preproc``) are
      the scorers ``hrbench`` and ``mmmu_vlmeval`` (``sparsectx.eval.scorers.mcq_reports``). CV-Bench's
      VLMEvalKit report averages its sources; our reader carries the ``source`` column in ``extra``, but
      no scorer reads it (``score`` is the plain mean hit), and nvidia-vlmeval 26.3 has no CV-Bench class
      to check one against.
    * Snapshot: the "near the end" condition in ``can_infer_option`` and the length guard in
      ``can_infer_text`` are in recent VLMEvalKit (and the copies of it we compared); older commits
      (e.g. 18fc37a) accept a lone letter anywhere and have no length guard, and one stored
      snapshot (134b4ea) reads the condition as ``index < len - 5``. Some forks also call
      ``can_infer`` only on predictions shorter than 10 characters in ``extract_answer_from_item``;
      VLMEvalKit's own ``prefetch_answer`` (used by the circular evaluation) has no such limit.
    * With ``VERBOSE`` set, VLMEvalKit refuses a lone ``A`` in a text of more than 3 tokens (a possible
      article); that is a logging mode, not the default, and is not followed.
    """
    correct = [is_choice_correct_vlmeval(item) for item in items]
    unmatched = sum(
        item.prediction is not None and vlmeval_choice(item.prediction, item.options) in (None, "Z") for item in items
    )
    return accuracy_metrics(items, correct, "unmatched", unmatched)


# --- what the judge and the VLMEvalKit bridge read ---------------------------------------------------------------


def choice_verdict(reply: str, options: Mapping[str, str]) -> str | None:
    """Returns the option letter a judge's reply names (``vlmeval_choice``), None when it names none of
    ``options`` (``Z``, the judge's "no option", included)."""
    letter = vlmeval_choice(reply, options)
    return letter if letter in options else None


def undecided_choice(item: ScoredItem) -> bool:
    """Returns whether ``match_choice`` reads no option in the prediction (``mcq``'s undecided answers)."""
    return match_choice(item.prediction, item.options) is None


def undecided_vlmeval_choice(item: ScoredItem) -> bool:
    """Returns whether VLMEvalKit's ``can_infer`` (``vlmeval_choice``) reads no option in the stripped prediction:
    the answers VLMEvalKit's multiple-choice judge sees."""
    return vlmeval_choice(item.prediction, dict(item.options)) is None


VLMEVAL_CHOICE_JUDGED = JudgedAnswers(template="choice", undecided=undecided_vlmeval_choice, verdict=choice_verdict)
"""What the optional judge re-reads for a scorer that reads answers as ``mcq_vlmeval`` does."""
MCQ_COLUMNS = ("question", "A", "B", "answer")
"""The TSV columns VLMEvalKit's multiple-choice ``evaluate`` reads (``ImageMCQDataset``)."""


def one_split_overall(metrics: dict[str, float]) -> float | None:
    """Returns 100 x ``Overall`` of report_acc's split row, None when the table has several splits (MMMU's
    dev and validation: the project scores their union, VLMEvalKit each)."""
    overall = [value for key, value in metrics.items() if key.endswith("/Overall")]
    return 100.0 * overall[0] if len(overall) == 1 else None


SPECS = (
    ScorerSpec(
        name="mcq",
        version=VERSION,
        fn=score_mcq,
        is_correct=is_choice_correct,
        resampling=ITEM_MEAN,
        needs_options=True,
        needs=("reference", "options"),
        judge=JudgedAnswers(template="choice", undecided=undecided_choice, verdict=choice_verdict),
    ),
    ScorerSpec(
        name="mcq_vlmeval",
        version=VERSION_VLMEVAL,
        fn=score_mcq_vlmeval,
        is_correct=is_choice_correct_vlmeval,
        resampling=ITEM_MEAN,
        needs_options=True,
        needs=("reference", "options"),
        judge=VLMEVAL_CHOICE_JUDGED,
        vlmeval=VlmevalReading(MCQ_COLUMNS, one_split_overall, "score", "report_acc Overall x 100"),
    ),
)
