"""MMBench circular evaluation: a question counts only if it is answered right under every rotation.

Source: MMBench (Liu et al., 2023, §3.2 "CircularEval"): each N-option question is asked N times
with its options circularly shifted; the model passes the question only if all N answers are
correct. Scale: percent of questions.

Rules: VLMEvalKit's exact-matching circular evaluation, vlmeval/dataset/utils/multiple_choice.py
``mcq_circular_eval`` with ``model=None``: rotations share ``g_index = index % 1e6`` (our
``group``); ``prefetch_circular_group`` reads each rotation with ``prefetch_answer``
(``can_infer`` on the unstripped prediction, our ``vlmeval_choice(..., strip=False)``); a group hits
only when every rotation's letter equals its ``GT``, and a group with an unread rotation scores 0
("no GPT-based answer matching under exact_matching"). ``report_acc`` then averages the hits of the
main rows over all questions and per ``category``.

Remaining differences: VLMEvalKit also reports ``l2-category`` means and per-``split`` rows, which
our items do not carry; it takes a group's category from its main row (``index == g_index``), we
require all rotations to share one category.
"""

from __future__ import annotations

from collections.abc import Sequence

from sparsectx.eval.scorers.base import ScoredItem, count_missing, per_key_accuracy, percent
from sparsectx.eval.scorers.mcq import MCQ_COLUMNS, choice_verdict, one_split_overall, vlmeval_choice
from sparsectx.eval.scorers.spec import (
    JudgedAnswers,
    Resampling,
    ScorerSpec,
    VlmevalReading,
    copy_group,
    whole_benchmark,
)

VERSION = 2
"""2: rotations read by VLMEvalKit's ``can_infer`` (was our ``match_choice``)."""


def mixed_categories(items: Sequence[ScoredItem]) -> dict[str, str]:
    """Returns item id -> why, for every rotation of a question whose rotations name different categories
    (a question's circular result counts in one category, so such a question cannot be scored)."""
    categories: dict[str, set[str]] = {}
    for item in items:
        categories.setdefault(item.group, set()).add(item.category)
    return {
        item.id: (
            f"mmbench_circular: question {item.group!r} has rotations in categories "
            f"{sorted(categories[item.group])}; rotations must share one category"
        )
        for item in items
        if len(categories[item.group]) > 1
    }


def is_rotation_correct(item: ScoredItem) -> bool:
    """Returns whether one rotation is right as VLMEvalKit's circular pre-fetch reads it (``prefetch_answer``:
    ``can_infer`` on the unstripped prediction)."""
    return vlmeval_choice(item.prediction, item.options, strip=False) == item.reference.strip()


def score_mmbench_circular(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns circular accuracy in percent (``score``) over questions, with per-rotation accuracy.

    Each item is one rotation; ``group`` is the question id shared by its rotations, ``reference``
    the gold letter in that rotation, ``options`` that rotation's letter -> text. Keys: ``score``
    (circular, percent of questions), ``rotation_acc`` (percent of single rotations correct),
    ``n`` (questions), ``n_items``, ``missing``, ``category/<name>`` (circular, per category).
    """
    mixed = mixed_categories(items)
    if mixed:
        raise ValueError(next(iter(mixed.values())))
    passed: dict[str, bool] = {}
    category: dict[str, str] = {}
    hits = 0
    for item in items:
        ok = is_rotation_correct(item)
        hits += ok
        passed[item.group] = passed.get(item.group, True) and ok
        category[item.group] = item.category
    metrics = {
        "score": percent(sum(passed.values()), len(passed)),
        "rotation_acc": percent(hits, len(items)),
        "n": float(len(passed)),
        "n_items": float(len(items)),
        "missing": float(count_missing(items)),
    }
    if any(category.values()):
        metrics |= per_key_accuracy(((category[g], ok) for g, ok in passed.items()), "category")
    return metrics


def question_unit(item: ScoredItem) -> str:
    """Returns the item's question (``group``): its rotations pass or fail together."""
    return item.group


def undecided_rotation(item: ScoredItem) -> bool:
    """Returns whether the circular pre-fetch (``can_infer``, unstripped) reads no option in the prediction."""
    return vlmeval_choice(item.prediction, dict(item.options), strip=False) is None


SPECS = (
    ScorerSpec(
        name="mmbench_circular",
        version=VERSION,
        fn=score_mmbench_circular,
        is_correct=is_rotation_correct,
        resampling=Resampling(question_unit, whole_benchmark, copy_group, additive=False),  # per question
        needs_options=True,
        needs=("reference", "options", "group"),
        group_rule=("category", mixed_categories),
        judge=JudgedAnswers(template="choice", undecided=undecided_rotation, verdict=choice_verdict),
        vlmeval=VlmevalReading(MCQ_COLUMNS, one_split_overall, "score", "report_acc Overall x 100 (circular)"),
    ),
)
