"""On-policy self-distillation training: pure numerical parts (divergences, reductions, position selectors,
budget schedules, EMA) and the registries that map YAML names to them; a step's inputs are built in
``contexts`` (encode once, prune, one prefix call), its loss in ``steps``, its update in ``update``.

Registries (keys equal the YAML file stems of their config group):
    DIVERGENCES: ``forward_kl`` (KL(teacher‖student)), ``reverse_kl`` (KL(student‖teacher)), ``jsd``.
    POSITION_SELECTORS: ``all``, ``top_sensitivity``, ``bottom_sensitivity``, ``top_kl``, ``random``, ``tip``.
    BUDGET_SCHEDULES: ``constant``, ``cosine_curriculum``, ``epic_progressive``, ``uniform``.
    LAYER_SCHEDULES: ``epic_deep_to_shallow`` (an in-LLM pruner's layer K per step, ``method.layer_schedule``).
"""

from sparsectx.training.divergences import DIVERGENCES
from sparsectx.training.positions import POSITION_SELECTORS
from sparsectx.training.schedules import BUDGET_SCHEDULES, LAYER_SCHEDULES

__all__ = ["BUDGET_SCHEDULES", "DIVERGENCES", "LAYER_SCHEDULES", "POSITION_SELECTORS"]
