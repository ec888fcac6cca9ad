"""OCRBench: answer containment, totalled out of 1000, with VLMEvalKit's category groups.

Source: OCRBench (Liu et al., 2024, "On the Hidden Mystery of OCR in Large Multimodal Models",
§3) as scored by VLMEvalKit, vlmeval/dataset/image_vqa.py ``OCRBench.evaluate`` (the same rules as
OCRBench's own scripts/eval scorer): a question scores 1 when one of its gold answers is a substring
of the prediction. For "Handwritten Mathematical Expression Recognition" both sides are stripped,
newlines become spaces and then spaces (only ``" "``, not tabs or other whitespace) are deleted,
and case is kept; in every other category both sides are lower-cased, stripped, and newlines
become spaces. An empty gold answer is contained in every prediction, as in VLMEvalKit.

Aggregates (``OCRBench.evaluate``'s ``final_score_dict``): ``Text Recognition`` is the sum of the
six recognition categories; it and the four other groups (Scene Text-centric VQA, Doc-oriented
VQA, Key Information Extraction, Handwritten Mathematical Expression Recognition) sum to the
``Final Score``, and ``Final Score Norm`` is it divided by 10. Our headline ``score`` is
``1000 * hits / n``, which equals ``Final Score`` on the full 1000-question benchmark and keeps
subsets on the same scale; ``final_score`` and ``group/<name>`` are the raw sums.

Remaining differences: a missing prediction scores 0 here; VLMEvalKit scores ``str(prediction)``,
so a NaN becomes ``"nan"`` and would contain a gold such as "n". VLMEvalKit raises on a category
outside the ten; we count it under its own ``category/<name>`` and in no group.
"""

from __future__ import annotations

from collections.abc import Sequence

from sparsectx.eval.scorers.base import ScoredItem, count_missing
from sparsectx.eval.scorers.spec import ITEM_MEAN, ScorerSpec, VlmevalReading

VERSION = 2
"""2: VLMEvalKit's rules: only spaces (not all whitespace) removed for the math category, empty gold
answers count as contained, and the category groups / ``final_score`` reported."""

MATH_CATEGORY = "Handwritten Mathematical Expression Recognition"
RECOGNITION = (
    "Regular Text Recognition",
    "Irregular Text Recognition",
    "Artistic Text Recognition",
    "Handwriting Recognition",
    "Digit String Recognition",
    "Non-Semantic Text Recognition",
)
GROUPS: dict[str, tuple[str, ...]] = {
    "Text Recognition": RECOGNITION,
    "Scene Text-centric VQA": ("Scene Text-centric VQA",),
    "Doc-oriented VQA": ("Doc-oriented VQA",),
    "Key Information Extraction": ("Key Information Extraction",),
    MATH_CATEGORY: (MATH_CATEGORY,),
}
"""VLMEvalKit's reported groups -> the categories summed into each."""


def _math_form(text: str) -> str:
    return text.strip().replace("\n", " ").replace(" ", "")


def _text_form(text: str) -> str:
    return text.lower().strip().replace("\n", " ")


def ocr_contains(prediction: str | None, answers: Sequence[str], category: str) -> bool:
    """Returns whether any gold answer is contained in the prediction under OCRBench's normalisation."""
    if prediction is None:
        return False
    form = _math_form if category == MATH_CATEGORY else _text_form
    pred = form(prediction)
    return any(form(answer) in pred for answer in answers)


def ocr_golds(item: ScoredItem) -> tuple[str, ...]:
    """Returns the item's accepted answers (``answers``, else ``reference``); raises ``ValueError`` naming the
    item when it has neither."""
    if not item.answers and not item.reference:
        raise ValueError(f"ocrbench: item {item.id!r} has neither answers nor a reference")
    return item.answers or (item.reference,)


def score_ocrbench(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns the OCRBench score out of 1000 (``score``) with VLMEvalKit's category and group sums.

    Reads ``answers`` (all accepted answers; ``reference`` is used when ``answers`` is empty) and
    ``category``. Keys: ``score``, ``hits``, ``final_score`` (raw sum over the five groups),
    ``final_score_norm`` (``final_score / 10``), ``n``, ``missing``, ``category/<name>`` (hits),
    ``group/<name>`` (hits summed per VLMEvalKit group).
    """
    per_category: dict[str, float] = {}
    hits = 0
    for item in items:
        hit = ocr_contains(item.prediction, ocr_golds(item), item.category)
        hits += hit
        per_category[item.category] = per_category.get(item.category, 0.0) + hit
    groups = {name: sum(per_category.get(cat, 0.0) for cat in cats) for name, cats in GROUPS.items()}
    final = sum(groups.values())
    return {
        "score": 1000.0 * hits / len(items),
        "hits": float(hits),
        "final_score": final,
        "final_score_norm": final / 10.0,
        "n": float(len(items)),
        "missing": float(count_missing(items)),
        **{f"category/{name}": value for name, value in sorted(per_category.items())},
        **{f"group/{name}": value for name, value in groups.items()},
    }


def is_ocrbench_correct(item: ScoredItem) -> bool:
    """Returns whether a gold answer (``answers``, else ``reference``) is contained in the prediction."""
    return ocr_contains(item.prediction, item.answers or (item.reference,), item.category)


SPECS = (
    ScorerSpec(
        name="ocrbench",
        version=VERSION,
        fn=score_ocrbench,
        is_correct=is_ocrbench_correct,
        resampling=ITEM_MEAN,  # 1000 x the share of items hit
        needs=("category",),
        rules={"answers": ocr_golds},
        vlmeval=VlmevalReading(("category", "answer"), lambda m: m["Final Score/sum"], "final_score", "Final Score"),
    ),
)
