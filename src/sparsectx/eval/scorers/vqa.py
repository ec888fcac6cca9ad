"""VQA soft accuracy over human answers (TextVQA): the official EvalAI reading and VLMEvalKit's.

Metric (both readings): ``Acc(ans) = min(#humans that said ans / 3, 1)`` averaged over the 10
leave-one-out subsets of 9 of the 10 human answers (Antol et al., 2015, §4). With 10 answers, 4 or
more matches give 1.0, 3 give 0.9, 2 give 0.6, 1 gives 0.3.

Normalisation, applied to the prediction and to every human answer:

* ``evalai`` (the headline ``score``): TextVQA's official EvalAI evaluation, the answer processor
  ``EvalAIAnswerProcessor`` (facebookresearch/mmf, mmf/datasets/processors/processors.py, also
  pythia/tasks/processors.py) with ``TextVQAAccuracyEvaluator`` (mmf/utils/m4c_evaluators.py):
  first ``word_tokenize`` (lower-case, delete ``,`` and ``?``, ``'s`` -> `` 's``, strip), then the
  steps below.
* ``vlmeval``: VLMEvalKit's reading, vlmeval/dataset/utils/vqa_eval.py ``process_answer`` (used by
  ``process_line(method='vqa_score')`` and ``hit_calculate`` for TextVQA): only the steps below.

Shared steps (the VQA challenge's ``processPunctuation`` / ``processDigitArticle``, GT-Vision-Lab/VQA
vqaEval.py, of which both are copies): newlines/tabs -> spaces, strip; each mark in ``PUNCTUATION``
is deleted when it touches a space or the text has a digit-comma-digit run, else replaced by a
space; then up to 32 periods not followed by a digit are deleted (the scripts pass ``re.UNICODE``,
which is 32, as ``re.sub``'s count); then per lower-cased word: number words zero-ten and "none" ->
digits, articles a/an/the dropped, and words found in the scripts' contraction table replaced
(``CONTRACTIONS``, the scripts' table as data, including its quirks: ``"somebody'd"`` maps to
``"somebodyd"`` and the capitalised keys ``Im``/``Ive``/``Id've`` never match lower-cased text).

Remaining differences: some VLMEvalKit snapshots write the period rule as ``(?<!\\d)\\.(?!\\d)``
(also keeping periods preceded by a digit) where the original reads ``(?!<=\\d)(\\.)(?!\\d)``
(effectively ``\\.(?!\\d)``); we follow the original. A missing prediction scores 0 here; both
scripts would normalise the string ``"None"``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from sparsectx.eval.scorers.base import ScoredItem, count_missing, percent
from sparsectx.eval.scorers.spec import ITEM_MEAN, ScorerSpec

VERSION = 2
"""2: the EvalAI answer processor for ``score`` and VLMEvalKit's ``process_answer`` for ``vlmeval``
(their own contraction table, period count) instead of our own normalisation."""

# fmt: off
PUNCTUATION = (
    ";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",", "?", "!",
)
# fmt: on
_DIGIT_COMMA = re.compile(r"\d,\d")
_PERIOD = re.compile(r"\.(?!\d)")
_PERIOD_COUNT = re.UNICODE  # 32: what the scripts pass as re.sub's count
_NUMBER_WORDS = {
    "none": "0",
    "zero": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
}
_ARTICLES = {"a", "an", "the"}
# The contraction table of the VQA/EvalAI scripts, as data: "key=value" pairs separated by spaces.
_CONTRACTION_PAIRS = (
    "aint=ain't arent=aren't cant=can't couldve=could've couldnt=couldn't couldn'tve=couldn't've "
    "couldnt've=couldn't've didnt=didn't doesnt=doesn't dont=don't hadnt=hadn't hadnt've=hadn't've "
    "hadn'tve=hadn't've hasnt=hasn't havent=haven't hed=he'd hed've=he'd've he'dve=he'd've hes=he's "
    "howd=how'd howll=how'll hows=how's Id've=I'd've I'dve=I'd've Im=I'm Ive=I've isnt=isn't itd=it'd "
    "itd've=it'd've it'dve=it'd've itll=it'll let's=let's maam=ma'am mightnt=mightn't "
    "mightnt've=mightn't've mightn'tve=mightn't've mightve=might've mustnt=mustn't mustve=must've "
    "neednt=needn't notve=not've oclock=o'clock oughtnt=oughtn't ow's'at='ow's'at 'ows'at='ow's'at "
    "'ow'sat='ow's'at shant=shan't shed've=she'd've she'dve=she'd've she's=she's shouldve=should've "
    "shouldnt=shouldn't shouldnt've=shouldn't've shouldn'tve=shouldn't've somebody'd=somebodyd "
    "somebodyd've=somebody'd've somebody'dve=somebody'd've somebodyll=somebody'll somebodys=somebody's "
    "someoned=someone'd someoned've=someone'd've someone'dve=someone'd've someonell=someone'll "
    "someones=someone's somethingd=something'd somethingd've=something'd've "
    "something'dve=something'd've somethingll=something'll thats=that's thered=there'd "
    "thered've=there'd've there'dve=there'd've therere=there're theres=there's theyd=they'd "
    "theyd've=they'd've they'dve=they'd've theyll=they'll theyre=they're theyve=they've twas='twas "
    "wasnt=wasn't wed've=we'd've we'dve=we'd've weve=we've werent=weren't whatll=what'll "
    "whatre=what're whats=what's whatve=what've whens=when's whered=where'd wheres=where's "
    "whereve=where've whod=who'd whod've=who'd've who'dve=who'd've wholl=who'll whos=who's "
    "whove=who've whyll=why'll whyre=why're whys=why's wont=won't wouldve=would've wouldnt=wouldn't "
    "wouldnt've=wouldn't've wouldn'tve=wouldn't've yall=y'all yall'll=y'all'll y'allll=y'all'll "
    "yall'd've=y'all'd've y'alld've=y'all'd've y'all'dve=y'all'd've youd=you'd youd've=you'd've "
    "you'dve=you'd've youll=you'll youre=you're youve=you've"
)
CONTRACTIONS = dict(pair.split("=", 1) for pair in _CONTRACTION_PAIRS.split())


def _strip_punctuation(text: str) -> str:
    remove_all = _DIGIT_COMMA.search(text) is not None
    out = text
    for mark in PUNCTUATION:
        if remove_all or f"{mark} " in text or f" {mark}" in text:
            out = out.replace(mark, "")
        else:
            out = out.replace(mark, " ")
    return _PERIOD.sub("", out, count=_PERIOD_COUNT)


def _digits_articles(text: str) -> str:
    words = [_NUMBER_WORDS.get(word, word) for word in text.lower().split()]
    return " ".join(CONTRACTIONS.get(word, word) for word in words if word not in _ARTICLES)


def normalize_vqa_answer(text: str) -> str:
    """Returns ``text`` normalised as VLMEvalKit's ``process_answer`` does (module docstring)."""
    return _digits_articles(_strip_punctuation(text.replace("\n", " ").replace("\t", " ").strip()))


def normalize_evalai_answer(text: str) -> str:
    """Returns ``text`` normalised as the EvalAI answer processor does (``word_tokenize`` first)."""
    text = text.lower().replace(",", "").replace("?", "").replace("'s", " 's").strip()
    return normalize_vqa_answer(text)


READINGS: dict[str, Callable[[str], str]] = {
    "evalai": normalize_evalai_answer,
    "vlmeval": normalize_vqa_answer,
}
"""The answer normalisation of each reading of the metric."""


def vqa_soft_accuracy(prediction: str | None, answers: Sequence[str], reading: str = "evalai") -> float:
    """Returns the leave-one-out VQA accuracy in [0, 1] of one prediction against human answers.

    ``mean_i min(#{j != i : answers[j] == prediction} / 3, 1)`` after normalising both sides, the
    score ``TextVQAAccuracyEvaluator._compute_answer_scores`` gives the prediction's unique answer
    (EvalAI) and ``hit_calculate``'s mean of ``process_line``'s matches (VLMEvalKit).

    Args:
        prediction: Extracted answer; ``None`` (a miss) scores 0.
        answers: The human answers (10 in VQAv2/TextVQA); at least 2, or no subset has any answer.
        reading: ``"evalai"`` (official) or ``"vlmeval"``; see the module docstring.
    """
    if reading not in READINGS:
        raise ValueError(f"vqa_soft_accuracy: reading={reading!r} is not one of {sorted(READINGS)}")
    normalize = READINGS[reading]
    if len(answers) < 2:
        raise ValueError(f"VQA soft accuracy needs at least 2 human answers, got {len(answers)}")
    if prediction is None:
        return 0.0
    pred = normalize(prediction)
    hits = [normalize(answer) == pred for answer in answers]
    total = sum(hits)
    return sum(min((total - hit) / 3.0, 1.0) for hit in hits) / len(hits)


def human_answers(item: ScoredItem) -> tuple[str, ...]:
    """Returns the item's human answers; raises ``ValueError`` naming the item when it has fewer than 2, on
    which soft accuracy is undefined (``vqa_soft_accuracy``)."""
    if len(item.answers) < 2:
        raise ValueError(
            f"vqa_soft: item {item.id!r} has {len(item.answers)} human answer(s) {list(item.answers)}; VQA soft "
            "accuracy needs at least 2 human answers (a Python list cell, e.g. TextVQA's ten)"
        )
    return item.answers


def score_vqa_soft(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns mean VQA soft accuracy in percent: ``score`` (EvalAI), ``vlmeval`` (VLMEvalKit's reading).

    Reads ``answers`` (the human answers). Keys: ``score``, ``vlmeval``, ``exact`` (share matching
    any annotator, EvalAI normalisation), ``n``, ``missing``.
    """
    soft = sum(vqa_soft_accuracy(item.prediction, item.answers) for item in items)
    soft_vlmeval = sum(vqa_soft_accuracy(item.prediction, item.answers, "vlmeval") for item in items)
    exact = sum(
        item.prediction is not None
        and normalize_evalai_answer(item.prediction) in {normalize_evalai_answer(a) for a in item.answers}
        for item in items
    )
    return {
        "score": 100.0 * soft / len(items),
        "vlmeval": 100.0 * soft_vlmeval / len(items),
        "exact": percent(exact, len(items)),
        "n": float(len(items)),
        "missing": float(count_missing(items)),
    }


def is_vqa_soft_correct(item: ScoredItem) -> bool:
    """Returns whether the answer matches at least one human answer (EvalAI soft accuracy > 0)."""
    return vqa_soft_accuracy(item.prediction, item.answers) > 0


SPECS = (
    ScorerSpec(
        name="vqa_soft",
        version=VERSION,
        fn=score_vqa_soft,
        is_correct=is_vqa_soft_correct,
        resampling=ITEM_MEAN,
        needs=("answers",),
        rules={"answers": human_answers},
    ),
)
