"""Each job's config composed as its entry point composes it, once per distinct command line.

``src/train.py`` and ``src/evaluate.py`` compose ``conf/train.yaml`` / ``conf/evaluate.yaml`` with the job's Hydra
overrides (``sparsectx.workflow.train_args`` / ``evaluate_args``); the plan composes the same lists inside the
Hydra context the Snakefile's sweep check uses (``sparsectx.workflow.sweeps``). Compositions are cached per
override list, so the ~800 evaluation jobs of a study share one per model (greedy) or per model and benchmark (Pass@K).
"""

from __future__ import annotations

from functools import lru_cache

from hydra import compose
from omegaconf import DictConfig

from sparsectx.paths import BASE
from sparsectx.workflow import Cell, Grid, efficiency_args, evaluate_args, train_args
from sparsectx.workflow.cells import EfficiencyRun, TrainRun
from sparsectx.workflow.sweeps import hydra_context


@lru_cache(maxsize=4096)
def composed(root: str, overrides: tuple[str, ...]) -> DictConfig:
    """Returns ``conf/<root>.yaml`` composed with ``overrides`` (cached per process; treat it as read-only)."""
    with hydra_context():
        return compose(root, overrides=list(overrides))


def train_config(grid: Grid, run: TrainRun, seed: int | None = None) -> DictConfig:
    """Returns the composed training config the train job of ``run`` (``seed``) runs."""
    return composed("train", tuple(train_args(grid, run, seed)))


def eval_config(grid: Grid, model: str, mode: str, bench: str = "") -> DictConfig:
    """Returns the composed evaluation config of ``model``'s untrained full-context cell in ``mode``: what every
    cell of that model and mode shares (engine batch, caps) and the blocks of its benchmarks (greedy: every
    benchmark a per-leaf job writes, in one composition; Pass@K: ``bench``'s)."""
    cell = Cell(model, BASE, grid.reference_pruner, 1.0, bench if mode == "passk" else "")
    return composed("evaluate", tuple(evaluate_args(grid, cell, mode=mode)))


def efficiency_config(grid: Grid, run: EfficiencyRun) -> DictConfig:
    """Returns the composed ``mode=efficiency`` config of ``run``."""
    return composed("evaluate", tuple(efficiency_args(grid, run)))
