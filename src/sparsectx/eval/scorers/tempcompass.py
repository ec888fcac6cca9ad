"""TempCompass (multiple choice, caption matching): VLMEvalKit's own rule-based matching, not the generic reader.

Source: nvidia-vlmeval 26.3 vlmeval/dataset/tempcompass.py ``TempCompass_MCQ.evaluate`` and utils/tempcompass.py
``evaluate_tempcompass_mcq``, ``eval_rule_multi_choice``, ``eval_rule_caption_matching`` and
``get_dimension_rating``. With ``model='exact_matching'`` a row the rule of its ``task_type`` cannot read
("fail") scores 0 (no judge).

- ``multi-choice`` (the ``answer`` cell ``"B. text"``): hit when the prediction, unstripped, equals the answer
  cell; else when it is one of ``A``-``D``, or starts with ``"A."``-``"D."`` or ``"A)"``-``"D)"``, and that letter
  is the answer's first character; anything else fails (``" B"``, ``"(B)"``, ``"b"``, ``"Answer: B"``).
- ``caption_matching`` (candidates and answer ``"Caption A: text"``, also ``Sentence A``/``Option 1``): the
  prediction is read as the last match of: a whole candidate; a candidate's sentence (after its first ``": "``,
  up to a second one), the whole prediction or its part after the first ``") "``; a candidate's label
  (``"Caption A"``) or the label's last word (``"A"``), the whole prediction or it with its dots removed. The
  match hits when it is the answer cell, its part before the first ``":"``, its sentence, or its label's second
  word. Anything else fails.

The row's ``task_type`` comes as ``ScoredItem.subset`` (the config's ``subset_field: task_type``). The cells are
rebuilt from the options: a multi-choice candidate as ``"<letter>. <text>"`` (the file's form; the reader drops
the letter), a caption candidate as written (the reader keeps ``"Caption A: "``), the answer as the gold
option's candidate (the reader maps the answer cell to the candidate equal to it).

Headline: ``get_dimension_rating`` reports ``[hits, rows]`` per ``"<dim>. <task_type>"``, no overall;
``score`` is their pooled ratio (hits / rows x 100). An extraction miss (``None``) is wrong; VLMEvalKit's
``.xlsx`` turns an empty prediction into NaN, on which its rules stop with an error.
"""

from __future__ import annotations

from collections.abc import Sequence

from sparsectx.eval.scorers.base import ScoredItem, accuracy_metrics, per_key_accuracy
from sparsectx.eval.scorers.mvbench import VIDEO_MCQ_COLUMNS, pooled_rating
from sparsectx.eval.scorers.spec import ITEM_MEAN, ScorerSpec, VlmevalReading

VERSION = 1

TASK_TYPES = ("multi-choice", "caption_matching")


def _multi_choice(prediction: str, answer: str) -> bool | None:
    """``eval_rule_multi_choice``: hit, miss, or None when it fails."""
    if prediction == answer:
        return True
    if prediction in ("A", "B", "C", "D"):
        return prediction == answer[0]
    if prediction.startswith(("A.", "B.", "C.", "D.")):
        return prediction.split(".")[0] == answer[0]
    if prediction.startswith(("A)", "B)", "C)", "D)")):
        return prediction.split(")")[0] == answer[0]
    return None


def _caption_matching(prediction: str, answer: str, candidates: list[str]) -> bool | None:
    """``eval_rule_caption_matching``: hit, miss, or None when it fails."""
    sentences = [candidate.split(": ")[1] for candidate in candidates]
    labels = [candidate.split(": ")[0] for candidate in candidates]
    labels += [label.replace("Sentence ", "").replace("Option ", "").replace("Caption ", "") for label in labels]
    read = None
    for candidate in candidates:
        if candidate == prediction:
            read = candidate
    for sentence in sentences:
        if sentence == prediction or (") " in prediction and sentence == prediction.split(") ")[1]):
            read = sentence
    for label in labels:
        if label == prediction or label == prediction.replace(".", ""):
            read = label
    if read is None:
        return None
    head = answer.split(": ")[0].split()
    return (
        read == answer
        or read == answer.split(":")[0]
        or read == answer.split(": ")[1]
        or (len(head) > 1 and read == head[1])  # a one-word label: VLMEvalKit's [1] raises here
    )


def task_type(item: ScoredItem) -> str:
    """Returns the row's ``task_type``; raises ``ValueError`` naming the item when the rule has none for it."""
    if item.subset not in TASK_TYPES:
        raise ValueError(
            f"tempcompass_mcq: item {item.id!r} has task_type {item.subset!r}; expected one of {TASK_TYPES} "
            "(set the benchmark's subset_field: task_type)"
        )
    return item.subset


def _cells(item: ScoredItem) -> tuple[str, list[str]]:
    """Returns the row's (answer cell, candidates) as the file writes them; raises naming a bad item."""
    if task_type(item) == "multi-choice":
        candidates = [f"{letter}. {text}" for letter, text in item.options.items()]
    else:
        candidates = list(item.options.values())
        bad = [text for text in candidates if ": " not in text]
        if bad:
            raise ValueError(
                f"tempcompass_mcq: item {item.id!r} is caption_matching but option {bad[0]!r} has no "
                "'<label>: ' (e.g. 'Caption A: text'), which VLMEvalKit's rule splits on"
            )
    return candidates[list(item.options).index(item.reference.strip())], candidates


def tempcompass_rating(item: ScoredItem) -> bool | None:
    """Returns the rule's reading of one row: True (hit), False (miss) or None (the rule fails: 0, no judge)."""
    answer, candidates = _cells(item)
    if item.prediction is None:
        return None
    if item.subset == "multi-choice":
        return _multi_choice(item.prediction, answer)
    return _caption_matching(item.prediction, answer, candidates)


def is_tempcompass_correct(item: ScoredItem) -> bool:
    """Returns whether TempCompass's rule for the row's ``task_type`` counts ``item.prediction`` right."""
    return tempcompass_rating(item) is True


def score_tempcompass_mcq(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns TempCompass multiple-choice accuracy in percent (hits / rows x 100 over both task types).

    Reads ``reference`` (gold letter), ``options`` and ``subset`` (the row's ``task_type``). Keys: ``score``,
    ``n``, ``missing``, ``unmatched`` (answers the rule cannot read, VLMEvalKit's "fail"), ``task/<task_type>``,
    ``category/<name>`` when categories are set.
    """
    ratings = [tempcompass_rating(item) for item in items]
    correct = [rating is True for rating in ratings]
    unmatched = sum(item.prediction is not None and r is None for item, r in zip(items, ratings, strict=True))
    metrics = accuracy_metrics(items, correct, "unmatched", unmatched)
    return {**metrics, **per_key_accuracy(((it.subset, ok) for it, ok in zip(items, correct, strict=True)), "task")}


SPECS = (
    ScorerSpec(
        name="tempcompass_mcq",
        version=VERSION,
        fn=score_tempcompass_mcq,
        is_correct=is_tempcompass_correct,
        resampling=ITEM_MEAN,  # hits / rows pooled over get_dimension_rating's dim/task rows
        needs_options=True,
        needs=("reference", "options", "subset"),
        rules={"subset": task_type, "options": _cells},
        vlmeval=VlmevalReading(
            (*VIDEO_MCQ_COLUMNS, "dim"),
            pooled_rating,
            "score",
            "get_dimension_rating hits / rows over dim. task_type x 100",
        ),
    ),
)
