"""Scorers: one benchmark family per module, all filed in ``SCORERS`` under their registry key.

Every family module is imported here explicitly so that importing this package registers all of
them (style convention 11). A benchmark config names its scorer by key, e.g. ``scorer: mme``.
"""

from sparsectx.eval.scorers import (
    exact,
    hallusionbench,
    logicvista,
    mathvista,
    mcq,
    mcq_reports,
    mlvu,
    mmbench,
    mme,
    mme_realworld,
    mvbench,
    ocrbench,
    pope,
    tempcompass,
    videomme,
    vqa,
    yes_no,
)
from sparsectx.eval.scorers.base import (
    SCORERS,
    ScoredItem,
    ScoreFn,
    Scorer,
    ScoreReport,
    register_scorer,
    score_items,
)
from sparsectx.eval.scorers.exact import normalize_short_answer, parse_number, vlmeval_accuracy
from sparsectx.eval.scorers.logicvista import is_logicvista_correct
from sparsectx.eval.scorers.mathvista import is_mathvista_correct
from sparsectx.eval.scorers.mcq import match_choice, vlmeval_choice
from sparsectx.eval.scorers.mcq_reports import is_mmmu_correct
from sparsectx.eval.scorers.mlvu import is_mlvu_correct
from sparsectx.eval.scorers.mme_realworld import is_mme_realworld_correct, mme_realworld_choice
from sparsectx.eval.scorers.mvbench import is_mvbench_correct
from sparsectx.eval.scorers.ocrbench import ocr_contains
from sparsectx.eval.scorers.pope import binary_metrics
from sparsectx.eval.scorers.tempcompass import is_tempcompass_correct
from sparsectx.eval.scorers.videomme import is_videomme_correct, videomme_choice
from sparsectx.eval.scorers.vqa import normalize_evalai_answer, normalize_vqa_answer, vqa_soft_accuracy
from sparsectx.eval.scorers.yes_no import parse_yes_no

__all__ = [
    "SCORERS",
    "ScoreFn",
    "ScoreReport",
    "ScoredItem",
    "Scorer",
    "binary_metrics",
    "exact",
    "hallusionbench",
    "is_logicvista_correct",
    "is_mathvista_correct",
    "is_mlvu_correct",
    "is_mme_realworld_correct",
    "is_mmmu_correct",
    "is_mvbench_correct",
    "is_tempcompass_correct",
    "is_videomme_correct",
    "logicvista",
    "mathvista",
    "match_choice",
    "mcq",
    "mcq_reports",
    "mlvu",
    "mmbench",
    "mme",
    "mme_realworld",
    "mme_realworld_choice",
    "mvbench",
    "normalize_evalai_answer",
    "normalize_short_answer",
    "normalize_vqa_answer",
    "ocr_contains",
    "ocrbench",
    "parse_number",
    "parse_yes_no",
    "pope",
    "register_scorer",
    "score_items",
    "tempcompass",
    "vlmeval_accuracy",
    "videomme",
    "videomme_choice",
    "vlmeval_choice",
    "vqa",
    "vqa_soft_accuracy",
    "yes_no",
]
