"""OCRBench: answer containment, totalled out of 1000.

Source: OCRBench (Liu et al., 2024, "On the Hidden Mystery of OCR in Large Multimodal Models",
§3): a question scores 1 when one of its gold answers is contained in the prediction. For the
"Handwritten Mathematical Expression Recognition" category all whitespace is removed from both
sides and case is kept; elsewhere both sides are lower-cased, stripped, newlines made spaces.
The headline ``score`` is ``1000 * hits / n``, which equals the raw hit count on the full
1000-question benchmark and keeps subsets on the same scale.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sparsectx.eval.scorers.base import ScoredItem, check_items, count_missing, register_scorer

VERSION = 1

MATH_CATEGORY = "Handwritten Mathematical Expression Recognition"
_WHITESPACE = re.compile(r"\s+")


def ocr_contains(prediction: str | None, answers: Sequence[str], category: str) -> bool:
    """Returns whether any gold answer is contained in the prediction under OCRBench's normalisation."""
    if prediction is None:
        return False
    if category == MATH_CATEGORY:
        pred = _WHITESPACE.sub("", prediction)
        golds = [_WHITESPACE.sub("", answer) for answer in answers]
    else:
        pred = prediction.lower().replace("\n", " ").strip()
        golds = [answer.lower().replace("\n", " ").strip() for answer in answers]
    return any(gold and gold in pred for gold in golds)


@register_scorer("ocrbench", VERSION)
def score_ocrbench(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns the OCRBench score out of 1000 (``score``), ``hits``, ``n``, ``missing``, per-category hits.

    Reads ``answers`` (all accepted answers; ``reference`` is used when ``answers`` is empty) and
    ``category``.
    """
    check_items(items, "ocrbench", needs=("category",))
    metrics: dict[str, float] = {}
    hits = 0
    for item in items:
        golds = item.answers or (item.reference,)
        if not any(golds):
            raise ValueError(f"ocrbench: item {item.id!r} has neither answers nor a reference")
        hit = ocr_contains(item.prediction, golds, item.category)
        hits += hit
        key = f"category/{item.category}"
        metrics[key] = metrics.get(key, 0.0) + hit
    return {
        "score": 1000.0 * hits / len(items),
        "hits": float(hits),
        "n": float(len(items)),
        "missing": float(count_missing(items)),
        **dict(sorted(metrics.items())),
    }
