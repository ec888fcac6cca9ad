"""The check that a sweep's points are what they claim: each point's training run, composed as its job composes
it, sets the sweep's parameter to the point's value.

A sweep (``tables`` entry of ``kind: sweep``, ``sparsectx.workflow.cells.Sweep``) pairs values with methods; a
variant's overrides or a preset's default could disagree with the value its point shows. The Snakefile runs this
check while it is parsed, so a mislabelled point fails before any job runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from sparsectx.workflow.cells import Cell, TrainRun
from sparsectx.workflow.commands import train_args
from sparsectx.workflow.config import CONF_DIR
from sparsectx.workflow.grid import Grid


@contextmanager
def hydra_context() -> Iterator[None]:
    """Hydra initialised on ``conf/`` for this block, or as it is when an entry point already initialised it."""
    if GlobalHydra.instance().is_initialized():
        yield
        return
    with initialize_config_dir(version_base=None, config_dir=str(CONF_DIR)):
        yield


def check_sweep_values(grid: Grid) -> None:
    """Returns None when every sweep point's composed training config sets the sweep's ``parameter.key`` to the
    point's value (and ``method.name`` to the point's method); else raises naming ``grid.tables.<sweep>``.

    Each point is composed for every model of its sweep, with the grid's own train overrides (``train_args``);
    an unsupported point (no job trains it) is skipped.
    """
    composed: dict[TrainRun, DictConfig] = {}  # a run in several sweeps (the default point) is composed once
    with hydra_context():
        for sweep in grid.sweeps.values():
            for model in sweep.models:
                for point in sweep.points:
                    cell = Cell(model, point.method, sweep.pruner, sweep.budget, sweep.benchmarks[0])
                    if grid.reason(cell) is not None:
                        continue
                    run = grid.train_run(cell)
                    if run not in composed:
                        composed[run] = compose("train", overrides=train_args(grid, run))
                    cfg = composed[run]
                    found = OmegaConf.select(cfg, sweep.key)
                    where = f"grid.tables.{sweep.name}: point {sweep.shown(point.value)} ({point.method}, {model})"
                    if not isinstance(found, int | float) or not math.isclose(found, point.value, rel_tol=1e-9):
                        raise ValueError(
                            f"{where} trains with {sweep.key}={found!r}, not {point.value}: set the point's value, "
                            f"or the method's override {sweep.key}={point.value}"
                        )
                    if cfg.method.name != point.method:
                        raise ValueError(f"{where} trains as method.name={cfg.method.name!r}, not {point.method!r}")
