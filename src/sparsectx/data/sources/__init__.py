"""Training sets built from downloaded datasets (LLaVA-CoT, LT-14K's mixture): ``build_training_set``."""

from sparsectx.data.sources.config import SourceConfig, TrainingSetConfig
from sparsectx.data.sources.sampler import draw_order, interleave
from sparsectx.data.sources.training_set import TrainingSetReport, build_training_set

__all__ = [
    "SourceConfig",
    "TrainingSetConfig",
    "TrainingSetReport",
    "build_training_set",
    "draw_order",
    "interleave",
]
