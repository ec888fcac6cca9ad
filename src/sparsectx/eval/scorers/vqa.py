"""VQA soft accuracy over human answers with EvalAI-style answer normalisation (TextVQA, VQAv2).

Source: the VQA challenge metric (Antol et al., 2015, §4 and the EvalAI/VQA evaluation page):
``Acc(ans) = min(#humans that said ans / 3, 1)``, averaged over the 10 leave-one-out subsets of
9 of the 10 human answers. So with 10 answers, 4 or more matches give 1.0, 3 give 0.9
(3 subsets keep 2 matches -> 2/3, 7 keep 3 -> 1), 2 give 0.6, 1 gives 0.3.

Normalisation (``normalize_vqa_answer``), applied to the prediction and to every human answer:
newlines/tabs -> spaces; punctuation in ``PUNCTUATION`` is deleted when it touches a space or the
text has a digit-comma-digit run, else replaced by a space; a period not followed by a digit is
deleted; then per lower-cased word: number words zero-ten (and "none") -> digits, articles
a/an/the dropped, contractions written without apostrophes restored (``dont`` -> ``don't``).
Deviations from the reference script, kept on purpose: it skips normalising the prediction when
all human answers agree, and it normalises human answers only partly (VQAv2's are pre-normalised);
we normalise both sides always. Our contraction table is built here (not copied); spellings that
are ordinary words (``well``, ``were``, ``its`` ...) are left alone.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

from sparsectx.eval.scorers.base import ScoredItem, check_items, count_missing, percent, register_scorer

VERSION = 1

# fmt: off
PUNCTUATION = (
    ";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",", "?", "!",
)
# fmt: on
_DIGIT_COMMA = re.compile(r"\d,\d")
_PERIOD = re.compile(r"\.(?!\d)")
_NUMBER_WORDS = {
    "none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4",
    "five": "5", "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10",
}  # fmt: skip
_ARTICLES = {"a", "an", "the"}
# fmt: off
_CONTRACTIONS = (
    "ain't", "aren't", "can't", "could've", "couldn't", "couldn't've", "didn't", "doesn't", "don't",
    "hadn't", "hadn't've", "hasn't", "haven't", "he'd", "he'd've", "he'll", "he's", "how'd", "how'll",
    "how's", "i'd", "i'd've", "i'll", "i'm", "i've", "isn't", "it'd", "it'd've", "it'll", "it's", "let's",
    "ma'am", "mightn't", "mightn't've", "might've", "mustn't", "must've", "needn't", "not've", "o'clock",
    "oughtn't", "shan't", "she'd", "she'd've", "she'll", "she's", "should've", "shouldn't", "shouldn't've",
    "somebody'd", "somebody'd've", "somebody'll", "somebody's", "someone'd", "someone'd've", "someone'll",
    "someone's", "something'd", "something'd've", "something'll", "something's", "that'd", "that's",
    "there'd", "there'd've", "there're", "there's", "they'd", "they'd've", "they'll", "they're", "they've",
    "'twas", "wasn't", "we'd", "we'd've", "we'll", "we're", "we've", "weren't", "what'll", "what're",
    "what's", "what've", "when's", "where'd", "where's", "where've", "who'd", "who'd've", "who'll",
    "who're", "who's", "who've", "why'd", "why'll", "why're", "why's", "won't", "would've", "wouldn't",
    "wouldn't've", "y'all", "y'all'd've", "y'all'll", "you'd", "you'd've", "you'll", "you're", "you've",
)
# fmt: on
# Apostrophe-less spellings that are ordinary words must stay as they are.
_REAL_WORDS = {"ill", "id", "its", "hell", "shell", "well", "were", "wed", "shed", "hed", "lets"}


def _contraction_table() -> dict[str, str]:
    table: dict[str, str] = {}
    for word in _CONTRACTIONS:
        parts = word.split("'")
        # Every way of dropping at least one of the word's apostrophes maps back to the word.
        for keep in itertools.product((True, False), repeat=len(parts) - 1):
            if all(keep):
                continue
            spelled = parts[0] + "".join(("'" if k else "") + p for k, p in zip(keep, parts[1:], strict=True))
            if spelled not in _REAL_WORDS:
                table[spelled] = word
    return table


CONTRACTIONS = _contraction_table()


def _strip_punctuation(text: str) -> str:
    remove_all = _DIGIT_COMMA.search(text) is not None
    out = text
    for mark in PUNCTUATION:
        if remove_all or f"{mark} " in text or f" {mark}" in text:
            out = out.replace(mark, "")
        else:
            out = out.replace(mark, " ")
    return _PERIOD.sub("", out)


def normalize_vqa_answer(text: str) -> str:
    """Returns ``text`` normalised as described in the module docstring (EvalAI VQA processing)."""
    text = _strip_punctuation(text.replace("\n", " ").replace("\t", " ").strip())
    words = []
    for word in text.lower().split():
        word = _NUMBER_WORDS.get(word, word)
        if word in _ARTICLES:
            continue
        words.append(CONTRACTIONS.get(word, word))
    return " ".join(words)


def vqa_soft_accuracy(prediction: str | None, answers: Sequence[str]) -> float:
    """Returns the leave-one-out VQA accuracy in [0, 1] of one prediction against human answers.

    ``mean_i min(#{j != i : answers[j] == prediction} / 3, 1)`` after normalising both sides.

    Args:
        prediction: Extracted answer; ``None`` (a miss) scores 0.
        answers: The human answers (10 in VQAv2/TextVQA); at least 2, or no subset has any answer.
    """
    if len(answers) < 2:
        raise ValueError(f"VQA soft accuracy needs at least 2 human answers, got {len(answers)}")
    if prediction is None:
        return 0.0
    pred = normalize_vqa_answer(prediction)
    hits = [normalize_vqa_answer(answer) == pred for answer in answers]
    total = sum(hits)
    return sum(min((total - hit) / 3.0, 1.0) for hit in hits) / len(hits)


@register_scorer("vqa_soft", VERSION)
def score_vqa_soft(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns mean VQA soft accuracy in percent (``score``) and the share matching any annotator.

    Reads ``answers`` (the human answers). Keys: ``score``, ``exact``, ``n``, ``missing``.
    """
    check_items(items, "vqa_soft", needs=("answers",))
    soft = sum(vqa_soft_accuracy(item.prediction, item.answers) for item in items)
    exact = sum(
        item.prediction is not None
        and normalize_vqa_answer(item.prediction) in {normalize_vqa_answer(a) for a in item.answers}
        for item in items
    )
    return {
        "score": 100.0 * soft / len(items),
        "exact": percent(exact, len(items)),
        "n": float(len(items)),
        "missing": float(count_missing(items)),
    }
