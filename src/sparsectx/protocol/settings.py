"""Every setting of every job of a study, composed exactly as the DAG's commands compose it.

Each training run's ``train.py`` config and each model's ``evaluate.py`` configs (greedy, Pass@K, efficiency)
are composed from the same overrides the Snakemake rules pass (``sparsectx.workflow.commands``), then
flattened to dotted keys. Grid axes (which model, pruner, budget, method and benchmark a job runs) are the
tables' rows and columns, so they are left out; each benchmark's own settings are listed per benchmark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from sparsectx.dotted import flatten
from sparsectx.eval.config import CONF_DIR
from sparsectx.paths import BASE
from sparsectx.protocol.leaves import stage_leaves
from sparsectx.workflow import Grid
from sparsectx.workflow.cells import Cell
from sparsectx.workflow.commands import efficiency_args, evaluate_args, train_args

BENCH_FIELDS = ("max_new_tokens", "scorer", "headline", "video.frames", "video.max_tokens")
"""The per-benchmark settings the card lists beside each benchmark's file (its layout is in
docs/benchmarks.md, checked against VLMEvalKit's own prompt builders)."""

Compose = Callable[[str, Sequence[str]], DictConfig]


@contextmanager
def composer() -> Iterator[Compose]:
    """Yields ``compose(config_name, overrides)`` over ``conf/``: Hydra's own when an entry point's
    ``@hydra.main`` already initialised it (make_tables), else a fresh one for this block."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    def run(name: str, overrides: Sequence[str]) -> DictConfig:
        return compose(name, overrides=list(overrides))

    if GlobalHydra.instance().is_initialized():
        yield run
        return
    with initialize_config_dir(version_base=None, config_dir=str(CONF_DIR)):
        yield run


@dataclass(frozen=True)
class Job:
    """One configured job of the study: its stage, the run it is (model, method) and its settings."""

    stage: str
    model: str
    method: str
    leaves: Mapping[str, Any]
    benches: Mapping[str, Mapping[str, Any]]
    """Benchmark -> its ``BENCH_FIELDS`` (evaluation stages only)."""

    @property
    def run(self) -> str:
        """Returns how the card names the run (``model / method``)."""
        return f"{self.model} / {self.method}"


def bench_fields(cfg: DictConfig) -> dict[str, dict[str, Any]]:
    """Returns benchmark -> its listed settings of a composed evaluation config."""
    out = {}
    for name, node in (OmegaConf.to_container(cfg.bench, resolve=True) or {}).items():
        leaves = flatten(node)
        out[str(name)] = {f: leaves[f] for f in BENCH_FIELDS if f in leaves}
    return out


def study_jobs(grid: Grid, compose: Compose) -> list[Job]:
    """Returns every distinct job configuration of ``grid``: one per training run (model x method), one
    greedy evaluation per model, and each model's Pass@K and efficiency configuration where the grid has
    those blocks."""
    jobs = []
    for run in grid.train_runs:
        cfg = compose("train", train_args(grid, run))
        jobs.append(Job("train", run.model, run.method, stage_leaves("train", cfg), {}))
    benches = compose("evaluate", [f"bench=[{','.join(grid.eval_benches())}]", *grid.overrides("evaluate")])
    for model, cell in first_cells(grid, "table").items():
        cfg = compose("evaluate", evaluate_args(grid, Cell(model, BASE, cell.pruner, cell.budget, cell.bench)))
        jobs.append(Job("evaluate", model, BASE, stage_leaves("evaluate", cfg), bench_fields(benches)))
    for model, cell in first_cells(grid, "passk").items():
        cfg = compose("evaluate", evaluate_args(grid, cell, mode="passk"))
        jobs.append(Job("passk", model, cell.method, stage_leaves("passk", cfg), {}))
    measured = {}
    for run in grid.efficiency_runs:
        measured.setdefault(run.model, run)
    for model, run in sorted(measured.items()):
        cfg = compose("evaluate", efficiency_args(grid, run))
        jobs.append(Job("efficiency", model, run.method, stage_leaves("efficiency", cfg), {}))
    return jobs


def first_cells(grid: Grid, kind: str) -> dict[str, Cell]:
    """Returns model -> its first cell among the blocks of ``kind`` (models in name order)."""
    found: dict[str, Cell] = {}
    for cell in grid.cells(kind):
        found.setdefault(cell.model, cell)
    return dict(sorted(found.items()))
