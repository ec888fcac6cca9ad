"""MME: accuracy and accuracy+ per category, summed into perception and cognition subtotals.

Source: VLMEvalKit ``vlmeval/dataset/utils/yorn.py`` ``MME_rating``, which reports ``perception`` and
``reasoning`` and each category; the headline is their sum, as upstream open-compass/VLMEvalKit's
``ImageYORNDataset.report_primary_metric`` reports it (``Overall Score``; that method is not in the pinned
nvidia-vlmeval 26.3);
the metric itself is MME's (Fu et al., 2023, §2.3). Each row is right when its yes/no reading
(``sparsectx.eval.scorers.yes_no.parse_yes_no``, VLMEvalKit's ``YOrN_Extraction``) equals the gold.
Questions are paired by **(category, image_path)** — VLMEvalKit's ``stats[category][image_path]`` —
not by image content: two files showing the same picture are two pairs, and one image asked about in
two categories makes one pair in each. Per category, ``acc`` is the percent of rows right and ``acc+``
the percent of pairs with both rows right; the category score is ``acc + acc+`` (max 200). Perception
sums its 10 categories (max 2000), reasoning (our ``cognition``; also reported as ``reasoning``) its 4
(max 800). The headline ``score`` is perception + reasoning (max 2800).

``group`` carries the row's ``image_path`` (``sparsectx.eval.protocol.scored_item`` fills it from the
TSV's ``image_path`` column, and from the image hash only for files without that column).

Remaining differences from VLMEvalKit: a pair must have exactly 2 rows here, the rows of any other group are
skipped when the file is read, naming their ``image_path`` (VLMEvalKit fails with an ``IndexError`` on 1 and
silently takes the first two for acc+ on 3 or more); a category absent from the
items adds 0 to its subtotal here, where ``MME_rating`` raises ``KeyError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from sparsectx.eval.scorers.base import ScoredItem, count_missing, percent
from sparsectx.eval.scorers.spec import Resampling, ScorerSpec, VlmevalReading, copy_group
from sparsectx.eval.scorers.yes_no import (
    YES_NO_JUDGED,
    gold_yes_no,
    is_yes_no_correct,
    parse_yes_no,
    vlmeval_yes_no_spelling,
)

VERSION = 2
"""2: pairs keyed by (category, image_path) instead of the image alone; ``reasoning`` key."""

PERCEPTION = (
    "existence",
    "count",
    "position",
    "color",
    "posters",
    "celebrity",
    "scene",
    "landmark",
    "artwork",
    "OCR",
)
COGNITION = ("commonsense_reasoning", "numerical_calculation", "text_translation", "code_reasoning")


def mme_category(item: ScoredItem) -> str:
    """Returns the item's category; raises ``ValueError`` naming the item when MME has no such category."""
    if item.category not in PERCEPTION + COGNITION:
        raise ValueError(
            f"mme: item {item.id!r} has category {item.category!r}; expected one of {', '.join(PERCEPTION + COGNITION)}"
        )
    return item.category


def _grouped(items: Sequence[ScoredItem]) -> dict[tuple[str, str], list[ScoredItem]]:
    """Returns the rows grouped by (category, image_path), VLMEvalKit's ``MME_rating`` key."""
    pairs: dict[tuple[str, str], list[ScoredItem]] = {}
    for item in items:
        pairs.setdefault((item.category, item.group), []).append(item)
    return pairs


def unpaired(items: Sequence[ScoredItem]) -> dict[str, str]:
    """Returns item id -> why, for every row whose (category, image_path) does not hold exactly 2 questions:
    MME's acc+ needs both questions of a picture, so such a row cannot be scored (``MME_rating`` fails)."""
    return {
        item.id: (
            f"mme: image_path {image!r} has {len(pair)} question(s) in category {category!r} "
            f"(items {', '.join(it.id for it in pair)}); MME needs exactly 2 per image and category"
        )
        for (category, image), pair in _grouped(items).items()
        if len(pair) != 2
        for item in pair
    }


def _pairs(items: Sequence[ScoredItem]) -> dict[tuple[str, str], list[ScoredItem]]:
    """Returns the rows grouped by (category, image_path); raises ``ValueError`` on a category MME does not
    have or a group that is not a pair (``load_bench_items`` skips such rows before any generation)."""
    for item in items:
        mme_category(item)
    problems = unpaired(items)
    if problems:
        raise ValueError(next(iter(problems.values())))
    return _grouped(items)


def score_mme(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns the MME total (``score`` = perception + cognition) with every category's acc and acc+.

    Reads ``reference`` (yes/no), ``category`` and ``group`` (the ``image_path`` joining a pair). Keys:
    ``score``, ``perception``, ``cognition`` (= ``reasoning``), ``<category>`` (acc + acc+), ``<category>/acc``,
    ``<category>/acc_plus``, ``n``, ``missing``, ``unparsed``. Categories absent from ``items`` add 0
    to their subtotal and get no keys.
    """
    metrics: dict[str, float] = {"perception": 0.0, "cognition": 0.0}
    questions: dict[str, list[bool]] = {}
    images: dict[str, list[bool]] = {}
    for (category, _), pair in _pairs(items).items():
        right = [parse_yes_no(it.prediction) == gold_yes_no(it, "mme") for it in pair]
        questions.setdefault(category, []).extend(right)
        images.setdefault(category, []).append(all(right))
    for category in PERCEPTION + COGNITION:
        if category not in questions:
            continue
        acc = percent(sum(questions[category]), len(questions[category]))
        acc_plus = percent(sum(images[category]), len(images[category]))
        metrics[f"{category}/acc"] = acc
        metrics[f"{category}/acc_plus"] = acc_plus
        metrics[category] = acc + acc_plus
        metrics["perception" if category in PERCEPTION else "cognition"] += acc + acc_plus
    unparsed = sum(it.prediction is not None and parse_yes_no(it.prediction) is None for it in items)
    return {
        "score": metrics["perception"] + metrics["cognition"],
        "n": float(len(items)),
        "missing": float(count_missing(items)),
        "unparsed": float(unparsed),
        **metrics,
        "reasoning": metrics["cognition"],
    }


def pair_unit(item: ScoredItem) -> str:
    """Returns the item's pair, (category, image_path): the rows acc+ scores jointly."""
    return f"{item.category}\x00{item.group}"


def category_stratum(item: ScoredItem) -> str:
    """Returns the item's category: each category's acc + acc+ is a term of the total."""
    return item.category


SPECS = (
    ScorerSpec(
        name="mme",
        version=VERSION,
        fn=score_mme,
        is_correct=is_yes_no_correct,
        resampling=Resampling(pair_unit, category_stratum, copy_group, additive=False),  # acc + acc+ per category
        needs=("reference", "category", "group"),
        rules={"reference": partial(gold_yes_no, scorer="mme"), "category": mme_category},
        group_rule=("group", unpaired),
        judge=YES_NO_JUDGED,
        vlmeval=VlmevalReading(
            ("category", "image_path", "answer"),
            lambda m: m["perception"] + m["reasoning"],
            "score",
            "MME_rating perception + reasoning",
            vlmeval_yes_no_spelling,
        ),
    ),
)
