"""The workflow's vocabulary: cells, training and efficiency runs, blocks, and the Snakefile's output patterns.

Paths come from ``sparsectx.paths``; the Snakefile's output patterns are the ``*_PATTERN`` strings below,
which a test checks against those functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

CHECKPOINT_MARKER = "config.json"
"""File of ``<run_dir>/checkpoint/`` (a HF directory, swapped in atomically) marking a finished run."""
EVAL_METHOD_KEY = "method"
"""``evaluate.py``'s key naming the training method of the evaluated weights (a path component)."""
STAGES = ("build_data", "train", "evaluate", "passk", "efficiency", "tables")
TARGET_STAGES = ("full_context", "sweep", "train", "trained", "passk", "efficiency")
"""The stages ``Grid.targets`` knows, in DAG order."""

RESULT_PATTERN = "results/{experiment}/{model}/{method}/{pruner}/{budget}/{bench}.json"
PASSK_PATTERN = "results/{experiment}/{model}/{method}/{pruner}/{budget}/{bench}.passk.json"
EFFICIENCY_PATTERN = "results/{experiment}/{model}/{method}/{pruner}/efficiency.json"
"""One file per (model, method, pruner): ``mode=efficiency`` measures its budgets (and 1.0) in one run."""
CHECKPOINT_PATTERN = "runs/{experiment}/{model}/{method}/{pruner}/{budget}/checkpoint/" + CHECKPOINT_MARKER
TABLES_PATTERN = "results/{experiment}/tables"
PREFLIGHT_PATTERN = "results/{experiment}/preflight.json"
"""The preflight's report (``src/preflight.py out=``), written only when every input passed: every train and
evaluation job of an experiment on user-provided inputs depends on it (``Grid.preflight_inputs``)."""
PLAN_PATTERN = "results/{experiment}/plan.md"
"""The plan of a study on user-provided inputs (``sparsectx.plan``): the first job, before the preflight."""
SEED_FOLDER = "seed{seed}"
"""Folder under ``results/`` and ``runs/`` of a training seed other than ``grid.seed`` (the layout
``sparsectx.report.seeds.seed_root`` reads: ``<results_root>/seed<s>/`` holds the usual tree)."""
SEED_RESULT_PATTERN = f"results/{SEED_FOLDER}/" + RESULT_PATTERN.removeprefix("results/")
SEED_CHECKPOINT_PATTERN = f"runs/{SEED_FOLDER}/" + CHECKPOINT_PATTERN.removeprefix("runs/")
LEAF_JOB_STEM = "all_benchmarks"
"""Stem of a per-leaf evaluation job's log and timing files (there is no ``{bench}`` to name them by)."""


@dataclass(frozen=True, order=True)
class Cell:
    """One evaluated (model, method, pruner, budget, benchmark) point."""

    model: str
    method: str
    pruner: str
    budget: float
    bench: str


@dataclass(frozen=True, order=True)
class TrainRun:
    """One training run: ``method`` on ``model``, pruned by ``pruner`` at ``budget``."""

    model: str
    method: str
    pruner: str
    budget: float


@dataclass(frozen=True, order=True)
class EfficiencyRun:
    """One ``mode=efficiency`` run: the budgets measured for (model, method, pruner) on ``bench``."""

    model: str
    method: str
    pruner: str
    budgets: tuple[float, ...]
    bench: str

    @property
    def cell(self) -> Cell:
        """Returns the run's first cell (it names the model, checkpoint, pruner and benchmark)."""
        return Cell(self.model, self.method, self.pruner, self.budgets[0], self.bench)


@dataclass(frozen=True)
class MissingCell:
    """A declared cell that no job produces, the block that declares it, and why."""

    block: str
    cell: Cell
    reason: str


@dataclass(frozen=True)
class Row:
    """One product of a block: ``methods x pruners x budgets`` (times its models and benchmarks)."""

    methods: tuple[str, ...]
    pruners: tuple[str, ...]
    budgets: tuple[float, ...]


@dataclass(frozen=True)
class Block:
    """A paper table, or the Pass@K or efficiency analysis: a union of row products."""

    name: str
    kind: str
    """``"table"``, ``"passk"`` or ``"efficiency"``: which leaf file its cells get."""
    models: tuple[str, ...]
    benchmarks: tuple[str, ...]
    rows: tuple[Row, ...]


@dataclass(frozen=True)
class Method:
    """A training method as the grid declares it; ``reason`` is set when it is unsupported."""

    name: str
    pruner: str
    budgets: tuple[float, ...]
    reason: str | None
    overrides: tuple[str, ...]
    """Hydra overrides for this method's training runs only (e.g. a learning rate scaled to the model)."""
    preset: str
    """The ``conf/method`` preset it composes: its own name, or (a variant) the preset its ``overrides`` change,
    trained and evaluated as ``method=<preset> method.name=<name>`` so its outputs carry its own name."""

    @property
    def variant(self) -> bool:
        """Returns whether the method is a variant of another preset (it has no ``conf/method`` file)."""
        return self.preset != self.name


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep: the parameter's value and the method trained with it."""

    value: float
    method: str


@dataclass(frozen=True)
class Sweep:
    """A hyperparameter sweep (a ``tables`` entry of ``kind: sweep``): trained methods at one pruner and budget,
    each a value of one parameter, scored by their mean over ``benchmarks`` of 100 x score / ``reference``'s
    full-context score (``reference`` at budget 1.0 under the grid's reference pruner)."""

    name: str
    models: tuple[str, ...]
    benchmarks: tuple[str, ...]
    pruner: str
    budget: float
    reference: str
    key: str
    """The Hydra key the points set (e.g. ``method.positions.fraction``), checked against each training run."""
    label: str
    """The x axis and the table's parameter column (e.g. ``ρ, response positions distilled``)."""
    percent: bool
    """Whether values are fractions shown as percentages."""
    points: tuple[SweepPoint, ...]

    def shown(self, value: float) -> str:
        """Returns ``value`` as the table and the plot show it (``5%`` for 0.05 when ``percent``)."""
        return f"{100 * value:g}%" if self.percent else f"{value:g}"


def mirror(pattern: str, root: str, stage: str, suffix: str) -> str:
    """Returns ``pattern`` moved under ``root/stage`` with ``suffix`` as its extension (log, benchmark).

    ``results/{experiment}/.../{bench}.json`` -> ``logs/evaluate/{experiment}/.../{bench}.log``.
    """
    path = pattern.removeprefix("results/").removeprefix("runs/")
    for ext in (f"/checkpoint/{CHECKPOINT_MARKER}", ".passk.json", ".json"):
        path = path.removesuffix(ext)
    return f"{root}/{stage}/{path}{suffix}"


def cell_of(wildcards: Mapping[str, str]) -> Cell:
    """Returns the cell a Snakemake job's wildcards name; a per-leaf evaluation job (its ``leaf`` wildcard is
    ``model/method/pruner/budget``, no ``bench``) names the leaf with ``bench`` empty."""
    w = wildcards
    if w.get("leaf") is not None:
        model, method, pruner, budget = w["leaf"].split("/")
        return Cell(model, method, pruner, float(budget), "")
    return Cell(w["model"], w["method"], w["pruner"], float(w["budget"]), w.get("bench", ""))


def run_of(wildcards: Mapping[str, str]) -> TrainRun:
    """Returns the training run a Snakemake job's wildcards name."""
    w = wildcards
    return TrainRun(w["model"], w["method"], w["pruner"], float(w["budget"]))


def seed_of(wildcards: Mapping[str, str]) -> int | None:
    """Returns the training seed a Snakemake job's ``seed`` wildcard names (jobs of ``SEED_*_PATTERN``); None for
    a job without one (``grid.seed``'s)."""
    seed = wildcards.get("seed")
    return None if seed is None else int(seed)
