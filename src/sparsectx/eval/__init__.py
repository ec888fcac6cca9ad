"""Pure parts of the evaluation engine: answer extraction, scorers, aggregates, pass@k."""

from sparsectx.eval.aggregate import Recovery, recovery, retain_ratio, retain_ratios
from sparsectx.eval.extract import EXTRACTOR_VERSION, Extraction, count_extractions, extract_answer
from sparsectx.eval.passk import hit_at_least, hit_rate, k_values, pass_at_k, pass_at_k_curve
from sparsectx.eval.scorers import SCORERS, ScoredItem, ScoreReport, ScorerSpec, score_items

__all__ = [
    "EXTRACTOR_VERSION",
    "SCORERS",
    "Extraction",
    "Recovery",
    "ScoreReport",
    "ScoredItem",
    "ScorerSpec",
    "count_extractions",
    "extract_answer",
    "hit_at_least",
    "hit_rate",
    "k_values",
    "pass_at_k",
    "pass_at_k_curve",
    "recovery",
    "retain_ratio",
    "retain_ratios",
    "score_items",
]
