"""Yes/no answer reading and accuracy, by VLMEvalKit's exact-matching rule (shared by MME, POPE, HallusionBench).

Source: VLMEvalKit ``vlmeval/dataset/utils/yorn.py`` ``YOrN_Extraction`` (the reading) with
``vlmeval/smp/misc.py`` ``process_punctuation`` (the punctuation pass it applies first), called from
``vlmeval/dataset/image_yorn.py`` ``ImageYORNDataset.evaluate`` with ``--judge exact_matching``.

The reading, step by step:

1. lowercase the answer;
2. punctuation: each of ``; / [ ] " { } ( ) = + \\ _ - > < @ ` , ? !`` is deleted when the text has it
   next to a space (``"p "`` or ``" p"``) or the text has a digit-comma-digit anywhere, and is replaced
   by a space otherwise (each mark decided on its own, always against the lowercased input); then a
   ``.`` not followed by a digit is deleted, at most 32 of them (VLMEvalKit passes ``re.UNICODE``, 32,
   where ``re.sub`` takes its ``count``);
3. split on whitespace; "yes" if the word ``yes`` occurs and ``no`` does not, "no" the other way round,
   otherwise unreadable (``None``; VLMEvalKit's ``Unknown``), so an answer with both words is unreadable.

Consequences worth knowing: markup tags split into words (``<b>yes</b>`` reads "yes"), but ``*``, ``:``
and ``'`` are not in the list, so ``**Yes**``, ``Yes:`` and ``'yes'`` are unreadable; ``yes/no`` is two
words, hence unreadable; ``not`` is not ``no``.

Scale: percent of questions answered with the gold yes/no.

Remaining differences from VLMEvalKit: VLMEvalKit reads the whole raw output; we read the answer that
``sparsectx.eval.extract`` took from it (for an untagged output without ``\\boxed``/"answer is" cues the
whole text, so the two agree there). VLMEvalKit compares the reading with the ``answer`` cell
case-sensitively (``Yes``/``No``, as in its TSVs; ``image_yorn.py`` ``evaluate``), we compare
lowercased and raise on a gold that is neither word. A ``None`` prediction (extraction miss) is wrong,
as VLMEvalKit's ``str(nan)`` reads ``Unknown``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

from sparsectx.eval.scorers.base import ScoredItem, accuracy_metrics
from sparsectx.eval.scorers.spec import ITEM_MEAN, JudgedAnswers, ScorerSpec

VERSION = 2
"""2: VLMEvalKit's ``YOrN_Extraction`` (both words -> unreadable; markup/punctuation as it splits)."""

_MARKS = ';/[]"{}()=+\\_-><@`,?!'  # VLMEvalKit's order (the order does not matter)
_DIGIT_COMMA_DIGIT = re.compile(r"\d,\d")
_PERIOD = re.compile(r"\.(?!\d)")
_PERIOD_LIMIT = int(re.UNICODE)  # 32: the ``count`` VLMEvalKit hands ``re.sub`` by mistake


def vlmeval_punctuation(text: str) -> str:
    """Returns ``text`` after VLMEvalKit's punctuation pass (``process_punctuation``, rule 2 above)."""
    delete_all = _DIGIT_COMMA_DIGIT.search(text) is not None
    out = text
    for mark in _MARKS:
        glued = delete_all or f"{mark} " in text or f" {mark}" in text
        out = out.replace(mark, "" if glued else " ")
    return _PERIOD.sub("", out, count=_PERIOD_LIMIT)


@functools.lru_cache(maxsize=1 << 16)
def parse_yes_no(prediction: str | None) -> str | None:
    """Returns ``"yes"``, ``"no"`` or ``None`` (unreadable: neither or both words) for a prediction.

    VLMEvalKit's ``YOrN_Extraction`` (module docstring); ``None`` stays ``None``. Cached: a pure function of
    the text, read again for every bootstrap resample of the same predictions (``sparsectx.report.bootstrap``).
    """
    if prediction is None:
        return None
    words = vlmeval_punctuation(prediction.lower()).split()
    has_yes, has_no = "yes" in words, "no" in words
    if has_yes != has_no:
        return "yes" if has_yes else "no"
    return None


def gold_yes_no(item: ScoredItem, scorer: str) -> str:
    """Returns the item's reference as ``"yes"``/``"no"``; raises ``ValueError`` for anything else."""
    gold = item.reference.strip().lower()
    if gold not in ("yes", "no"):
        raise ValueError(f"{scorer}: item {item.id!r} has reference {item.reference!r}; expected 'yes' or 'no'")
    return gold


def is_yes_no_correct(item: ScoredItem) -> bool:
    """Returns whether the prediction's yes/no reading (``parse_yes_no``) is the gold word, read lower-cased (the
    per-item verdict of every yes/no scorer: ``yes_no``, ``pope``, ``mme``, ``hallusionbench``)."""
    return parse_yes_no(item.prediction) == item.reference.strip().lower()


def undecided_yes_no(item: ScoredItem) -> bool:
    """Returns whether the prediction reads as neither word (VLMEvalKit's ``Unknown``, the answers its judge sees)."""
    return parse_yes_no(item.prediction) is None


def yes_no_verdict(reply: str, options: Mapping[str, str]) -> str | None:
    """Returns the ``Yes``/``No`` a judge's reply reads as (``parse_yes_no``), None when neither."""
    word = parse_yes_no(reply)
    return None if word is None else word.capitalize()


YES_NO_JUDGED = JudgedAnswers(template="yes_no", undecided=undecided_yes_no, verdict=yes_no_verdict)
"""What the optional judge re-reads for a yes/no scorer: the answers read as neither word."""


def vlmeval_yes_no_spelling(index: str, row: Mapping[str, str]) -> str | None:
    """Returns why VLMEvalKit would misread a yes/no row of a benchmark TSV: a gold not spelt ``Yes``/``No``
    (``image_yorn.py`` ``evaluate`` compares it with its reading case-sensitively; the synthetic files' lower case
    would all read wrong), else None."""
    if row["answer"] not in ("Yes", "No"):
        return (
            f"row index {index} has answer {row['answer']!r} (column 'answer'); VLMEvalKit compares "
            "it with its reading case-sensitively, so its files spell Yes / No"
        )
    return None


def score_yes_no(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns yes/no accuracy in percent (``score``), ``n``, ``missing``, ``unparsed``, per category."""
    correct = [parse_yes_no(item.prediction) == gold_yes_no(item, "yes_no") for item in items]
    unparsed = sum(it.prediction is not None and parse_yes_no(it.prediction) is None for it in items)
    return accuracy_metrics(items, correct, "unparsed", unparsed)


SPECS = (
    ScorerSpec(
        name="yes_no",
        version=VERSION,
        fn=score_yes_no,
        is_correct=is_yes_no_correct,
        resampling=ITEM_MEAN,
        needs=("reference",),
        rules={"reference": functools.partial(gold_yes_no, scorer="yes_no")},
        judge=YES_NO_JUDGED,
    ),
)
