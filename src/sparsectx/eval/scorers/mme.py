"""MME: accuracy and accuracy+ per category, summed into perception and cognition subtotals.

Source: MME (Fu et al., 2023, §2.3). Every image carries two yes/no questions (one "yes", one
"no"). Per category, ``acc`` is the percent of questions answered correctly and ``acc+`` the
percent of images with *both* questions correct; the category score is ``acc + acc+`` (max 200).
Perception sums its 10 categories (max 2000), cognition its 4 (max 800). The headline ``score``
is perception + cognition (max 2800), the MME number printed in SCOPD's and LT-OPD's tables.
Category spellings are VLMEvalKit's ``category`` column (VLMEvalKit calls cognition "reasoning").
"""

from __future__ import annotations

from collections.abc import Sequence

from sparsectx.eval.scorers.base import ScoredItem, check_items, count_missing, percent, register_scorer
from sparsectx.eval.scorers.yes_no import gold_yes_no, parse_yes_no

VERSION = 1

PERCEPTION = (
    "existence", "count", "position", "color", "posters",
    "celebrity", "scene", "landmark", "artwork", "OCR",
)  # fmt: skip
COGNITION = ("commonsense_reasoning", "numerical_calculation", "text_translation", "code_reasoning")


def _pairs(items: Sequence[ScoredItem]) -> dict[str, list[ScoredItem]]:
    pairs: dict[str, list[ScoredItem]] = {}
    for item in items:
        if item.category not in PERCEPTION + COGNITION:
            raise ValueError(
                f"mme: item {item.id!r} has category {item.category!r}; expected one of "
                f"{', '.join(PERCEPTION + COGNITION)}"
            )
        pairs.setdefault(item.group, []).append(item)
    for image, pair in pairs.items():
        if len(pair) != 2 or pair[0].category != pair[1].category:
            raise ValueError(
                f"mme: image {image!r} has {len(pair)} question(s) in categories "
                f"{sorted({it.category for it in pair})}; MME needs exactly 2 per image in one category"
            )
    return pairs


@register_scorer("mme", VERSION)
def score_mme(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns the MME total (``score`` = perception + cognition) with every category's acc and acc+.

    Reads ``reference`` (yes/no), ``category`` and ``group`` (the image id joining a pair). Keys:
    ``score``, ``perception``, ``cognition``, ``<category>`` (acc + acc+), ``<category>/acc``,
    ``<category>/acc_plus``, ``n``, ``missing``, ``unparsed``. Categories absent from ``items`` add 0
    to their subtotal and get no keys.
    """
    check_items(items, "mme", needs=("reference", "category", "group"))
    metrics: dict[str, float] = {"perception": 0.0, "cognition": 0.0}
    questions: dict[str, list[bool]] = {}
    images: dict[str, list[bool]] = {}
    for pair in _pairs(items).values():
        right = [parse_yes_no(it.prediction) == gold_yes_no(it, "mme") for it in pair]
        questions.setdefault(pair[0].category, []).extend(right)
        images.setdefault(pair[0].category, []).append(all(right))
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
    }
