"""Which leaves an experiment has: the grid behind the Snakefile, and the cells it cannot run yet.

An experiment preset (``conf/experiment/<name>.yaml``) carries a ``grid:`` block. It declares the models,
pruners, benchmarks and training methods the study names, each supported or marked ``unsupported: <reason>``,
and blocks of cells: ``tables`` (one per paper table), ``passk`` and ``efficiency``. A block is a union of
products ``models x methods x pruners x budgets x benchmarks``; table and Pass@K blocks also get the
full-context reference cells (method ``base`` with ``reference_pruner`` at budget 1.0). A cell whose model,
pruner, method, training pruner or benchmark is unsupported is reported by ``missing_cells`` with every
reason; each other cell is a leaf the Snakefile schedules. Nothing is dropped silently: every declared entry
must appear in some block, so every unsupported one shows up as missing cells in the tables.

Paths come from ``sparsectx.paths``; the Snakefile's output patterns are the ``*_PATTERN`` strings below,
which a test checks against those functions.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from sparsectx.budget import check_budget
from sparsectx.paths import budget_tag, leaf_dir, result_path, run_dir

REPO_DIR = Path(__file__).resolve().parents[2]
CONF_DIR = REPO_DIR / "conf"
"""Hydra's config directory (the entry points in ``src/`` use ``config_path="../conf"``)."""
SCHEMA_PATH = REPO_DIR / "workflow" / "schemas" / "config.schema.yaml"

BASE = "base"
"""Method name of the untrained model (no checkpoint; never declared in ``grid.methods``)."""
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


def load_yaml(path: Path) -> Any:
    """Returns the parsed YAML file at ``path``."""
    with open(path) as f:
        return yaml.safe_load(f)


def resolve_config(config: Mapping[str, Any], conf_dir: str | Path = CONF_DIR) -> dict[str, Any]:
    """Returns the Snakemake config with ``grid`` set to the experiment preset's grid.

    Keys of ``config["grid"]`` (e.g. from ``--configfile``) replace the preset's keys of the same name
    whole, without a deep merge, so a reduced test grid never inherits stray tables.

    Args:
        config: ``experiment`` (a ``conf/experiment`` stem), ``grid`` (replacement keys) and
            ``hydra_overrides`` (stage -> extra Hydra overrides).
        conf_dir: Hydra's config directory.
    """
    experiment = config.get("experiment")
    folder = Path(conf_dir) / "experiment"
    path = folder / f"{experiment}.yaml"
    if not isinstance(experiment, str) or not path.is_file():
        known = sorted(p.stem for p in folder.glob("*.yaml"))
        raise ValueError(f"config experiment={experiment!r} has no preset {path}; available: {known}")
    preset = load_yaml(path) or {}
    if not isinstance(preset.get("grid"), dict):
        raise ValueError(f"{path} has no `grid:` mapping; every experiment preset declares its grid")
    return {**config, "grid": {**preset["grid"], **(config.get("grid") or {})}}


def validate_config(config: Mapping[str, Any], schema_path: Path = SCHEMA_PATH) -> None:
    """Returns None if ``config`` matches the workflow schema; else raises ``ValueError`` naming each key."""
    validator = jsonschema.Draft202012Validator(load_yaml(schema_path))
    errors = sorted(validator.iter_errors(dict(config)), key=lambda e: list(map(str, e.path)))
    if errors:
        lines = [f"config.{'.'.join(map(str, e.path)) or '<root>'}: {e.message}" for e in errors]
        raise ValueError(f"workflow config does not match {schema_path}:\n  " + "\n  ".join(lines))


def load_grid(
    experiment: str, grid_replacements: Mapping[str, Any] | None = None, conf_dir: str | Path = CONF_DIR
) -> Grid:
    """Returns the checked grid of ``conf/experiment/<experiment>.yaml`` (keys replaced as in
    ``resolve_config``)."""
    config = {"experiment": experiment, "grid": dict(grid_replacements or {}), "hydra_overrides": {}}
    resolved = resolve_config(config, conf_dir)
    validate_config(resolved)
    return Grid(experiment, resolved["grid"])


def missing_cells(experiment: str | Grid) -> list[MissingCell]:
    """Returns every declared-but-unsupported cell of an experiment with its reason (the footnotes)."""
    grid = experiment if isinstance(experiment, Grid) else load_grid(experiment)
    return grid.missing_cells()


def _declared(section: Mapping[str, Any]) -> dict[str, str | None]:
    return {name: (spec or {}).get("unsupported") for name, spec in section.items()}


def _budgets(values: Iterable[float], key: str) -> tuple[float, ...]:
    return tuple(check_budget(b, f"{key}[{i}]") for i, b in enumerate(values))


class Grid:
    """The leaves of one experiment; dangling names and clashing outputs raise on construction.

    Args:
        experiment: The preset's file stem; must equal ``grid["name"]``.
        grid: The ``grid:`` mapping, already checked by ``validate_config``.
        extra_overrides: Stage -> Hydra overrides appended after the grid's own (the Snakemake config's
            ``hydra_overrides``; tests shorten runs with it).
    """

    def __init__(
        self, experiment: str, grid: Mapping[str, Any], extra_overrides: Mapping[str, list[str]] | None = None
    ) -> None:
        if grid["name"] != experiment:
            raise ValueError(f"grid.name={grid['name']!r} must equal the preset's file stem {experiment!r}")
        self.experiment = experiment
        self.models = _declared(grid["models"])
        self.model_pruners: dict[str, dict[str, str]] = {
            name: dict((spec or {}).get("unsupported_pruners", {})) for name, spec in grid["models"].items()
        }
        """Model -> {pruner: reason} for pruners that model's family cannot run (e.g. in-LLM on a hybrid)."""
        self.pruners = _declared(grid["pruners"])
        self.benchmarks = _declared(grid["benchmarks"])
        self.methods = {
            name: Method(name, spec["pruner"], _budgets(spec["budgets"], f"grid.methods.{name}.budgets"),
                         spec.get("unsupported"), tuple(spec.get("overrides", ())))
            for name, spec in grid["methods"].items()
        }  # fmt: skip
        self.reference_pruner: str = grid["reference_pruner"]
        self.seed: int = grid["seed"]
        self.resources: dict[str, dict[str, int]] = grid["resources"]
        self.data: dict[str, Any] = grid["data"]
        extra = extra_overrides or {}
        self._overrides = {s: [*grid["overrides"].get(s, []), *extra.get(s, [])] for s in STAGES}
        self.blocks = tuple(self._blocks(grid))
        self._check_names()
        self._cells = {b.name: self._block_cells(b) for b in self.blocks}
        self._check_blocks()
        self.train_runs = sorted({self.train_run(c) for c in self.cells() if c.method != BASE})
        """Every training run a supported cell evaluates, sorted."""
        self.efficiency_runs = self._efficiency_runs()
        """One run per (model, method, pruner) of the supported efficiency cells, sorted."""

    @staticmethod
    def _blocks(grid: Mapping[str, Any]) -> Iterable[Block]:
        named = [(name, "table", spec) for name, spec in grid["tables"].items()]
        named += [(kind, kind, grid[kind]) for kind in ("passk", "efficiency") if grid[kind] is not None]
        for name, kind, spec in named:
            key = f"grid.{name}.rows"
            rows = tuple(
                Row(tuple(row["methods"]), tuple(row["pruners"]), _budgets(row["budgets"], key))
                for row in spec["rows"]
            )
            yield Block(name, kind, tuple(spec["models"]), tuple(spec["benchmarks"]), rows)

    def _check_names(self) -> None:
        if BASE in self.methods:
            raise ValueError(f"grid.methods.{BASE}: {BASE!r} is the untrained model and is never declared")
        used: dict[str, set[str]] = {"models": set(), "methods": set(), "benchmarks": set()}
        used["pruners"] = {self.reference_pruner} | {m.pruner for m in self.methods.values()}
        for block in self.blocks:
            used["models"].update(block.models)
            used["benchmarks"].update(block.benchmarks)
            for row in block.rows:
                used["methods"].update(m for m in row.methods if m != BASE)
                used["pruners"].update(row.pruners)
        declared = {"models": self.models, "pruners": self.pruners, "benchmarks": self.benchmarks}
        for section, names in {**declared, "methods": self.methods}.items():
            undeclared, unused = sorted(used[section] - set(names)), sorted(set(names) - used[section])
            if undeclared:
                raise ValueError(f"the grid's blocks use {section} {undeclared}; grid.{section} lacks them")
            if unused:
                raise ValueError(
                    f"grid.{section} declares {unused} but no block uses them: use them (an unsupported "
                    "entry then shows as missing cells in the tables) or delete them"
                )
        if self.pruners[self.reference_pruner] is not None:
            raise ValueError(f"grid.reference_pruner={self.reference_pruner!r} is declared unsupported")
        for model, reasons in self.model_pruners.items():
            unknown = sorted(set(reasons) - set(self.pruners))
            if unknown:
                raise ValueError(
                    f"grid.models.{model}.unsupported_pruners names {unknown}; grid.pruners lacks them"
                )
            if self.reference_pruner in reasons:
                raise ValueError(
                    f"grid.models.{model}.unsupported_pruners holds the reference pruner "
                    f"{self.reference_pruner!r}: the model's full-context cells need it"
                )

    def _check_blocks(self) -> None:
        for block in self.blocks:
            if block.kind == "efficiency" and len(block.benchmarks) != 1:
                raise ValueError(f"grid.efficiency.benchmarks={list(block.benchmarks)}: name exactly one")
            for row in (r for r in block.rows if 1.0 in r.budgets):
                if block.kind == "efficiency":
                    raise ValueError("grid.efficiency: drop budget 1.0; every efficiency run measures it")
                if set(row.pruners) != {self.reference_pruner}:
                    raise ValueError(
                        f"grid.{block.name}: budget 1.0 keeps every token, so pruners {list(row.pruners)} "
                        f"would repeat one run; list 1.0 only in rows whose pruners are "
                        f"[{self.reference_pruner}] (grid.reference_pruner)"
                    )

    # ---- cells -------------------------------------------------------------------------------------------
    def _block_cells(self, block: Block) -> list[Cell]:
        cells: set[Cell] = set()
        if block.kind != "efficiency":
            refs = itertools.product(block.models, block.benchmarks)
            cells.update(Cell(model, BASE, self.reference_pruner, 1.0, bench) for model, bench in refs)
        for row in block.rows:
            product = itertools.product(block.models, row.methods, row.pruners, row.budgets, block.benchmarks)
            cells.update(Cell(*point) for point in product)
        return sorted(cells)

    def block_cells(self, block: Block) -> list[Cell]:
        """Returns the cells of ``block``: its row products plus (except efficiency) the reference cells."""
        return list(self._cells[block.name])

    def reason(self, cell: Cell) -> str | None:
        """Returns why ``cell`` cannot run (every unsupported part, joined by "; "), or None if it can."""
        on_model = self.model_pruners[cell.model]
        parts = [("model", cell.model, self.models[cell.model])]
        parts.append(("pruner", cell.pruner, self.pruners[cell.pruner]))
        parts.append(("pruner", f"{cell.pruner} on {cell.model}", on_model.get(cell.pruner)))
        if cell.method != BASE:
            method = self.methods[cell.method]
            parts.append(("method", cell.method, method.reason))
            if method.pruner != cell.pruner:
                parts.append(("training pruner", method.pruner, self.pruners[method.pruner]))
                parts.append(
                    ("training pruner", f"{method.pruner} on {cell.model}", on_model.get(method.pruner))
                )
        parts.append(("benchmark", cell.bench, self.benchmarks[cell.bench]))
        return "; ".join(f"{kind} {name}: {why}" for kind, name, why in parts if why is not None) or None

    def missing_cells(self) -> list[MissingCell]:
        """Returns the cells no job produces, each with its block and reason, in block order."""
        return [
            MissingCell(block.name, cell, why)
            for block in self.blocks
            for cell in self._cells[block.name]
            if (why := self.reason(cell)) is not None
        ]

    def cells(self, kind: str | None = None) -> list[Cell]:
        """Returns the supported cells of blocks of ``kind`` (every kind if None), sorted and unique."""
        blocks = [b for b in self.blocks if kind in (None, b.kind)]
        return sorted({c for b in blocks for c in self._cells[b.name] if self.reason(c) is None})

    def train_run(self, cell: Cell) -> TrainRun:
        """Returns the training run whose checkpoint ``cell`` evaluates.

        A method trained at one budget is evaluated at any budget and with any pruner. A method trained at
        several budgets is evaluated at those only: a result path names the evaluation budget, not the
        training one.
        """
        method = self.methods[cell.method]
        if len(method.budgets) == 1:
            budget = method.budgets[0]
        elif cell.budget in method.budgets:
            budget = cell.budget
        else:
            raise ValueError(
                f"cell {cell}: method {cell.method!r} trains at budgets {list(method.budgets)}, so a result "
                f"at {cell.budget} would not say which checkpoint it evaluates; evaluate it at those only"
            )
        return TrainRun(cell.model, cell.method, method.pruner, budget)

    def _efficiency_runs(self) -> list[EfficiencyRun]:
        groups: dict[tuple[str, str, str], list[Cell]] = {}
        for cell in self.cells("efficiency"):
            groups.setdefault((cell.model, cell.method, cell.pruner), []).append(cell)
        runs = []
        for (model, method, pruner), cells in sorted(groups.items()):
            if method != BASE and len({self.train_run(c) for c in cells}) > 1:
                raise ValueError(f"grid.efficiency: {model}/{method}/{pruner} would need several checkpoints")
            budgets = tuple(sorted({c.budget for c in cells}))
            runs.append(EfficiencyRun(model, method, pruner, budgets, cells[0].bench))
        return runs

    def efficiency_run(self, model: str, method: str, pruner: str) -> EfficiencyRun:
        """Returns the efficiency run of (model, method, pruner)."""
        (run,) = [r for r in self.efficiency_runs if (r.model, r.method, r.pruner) == (model, method, pruner)]
        return run

    def names(self, wildcard: str) -> list[str]:
        """Returns the values ``wildcard`` takes in some scheduled output (for ``wildcard_constraints``)."""
        points = [*self.cells(), *(Cell(r.model, r.method, r.pruner, r.budget, "") for r in self.train_runs)]
        values = {
            "model": {p.model for p in points},
            "method": {p.method for p in points},
            "pruner": {p.pruner for p in points},
            "budget": {budget_tag(p.budget) for p in points},
            "bench": {p.bench for p in points if p.bench},
        }[wildcard]
        return sorted(values)

    def constraint(self, wildcard: str, exclude: Iterable[str] = ()) -> str:
        """Returns a regex matching exactly the scheduled values of ``wildcard``, minus ``exclude``."""
        values = [re.escape(v) for v in self.names(wildcard) if v not in set(exclude)]
        return "|".join(values) or "(?!)"  # (?!) never matches: a rule with no leaves matches nothing

    def unknown_conf_names(self, conf_dir: str | Path = CONF_DIR) -> list[str]:
        """Returns the ``conf/<group>/<name>.yaml`` files a scheduled output needs that do not exist."""
        wanted = [("model", m) for m in self.names("model")] + [("pruner", p) for p in self.names("pruner")]
        wanted += [("bench", b) for b in self.names("bench")]
        wanted += [("method", r.method) for r in self.train_runs]
        paths = sorted({Path(conf_dir) / group / f"{name}.yaml" for group, name in wanted})
        return [str(p) for p in paths if not p.is_file()]

    # ---- paths -------------------------------------------------------------------------------------------
    def leaf(self, cell: Cell, kind: str = "table") -> str:
        """Returns the output of ``cell`` in a block of ``kind`` (efficiency: the file of its run)."""
        folder = leaf_dir("results", self.experiment, cell.model, cell.method, cell.pruner, cell.budget)
        if kind == "table":
            return str(result_path(folder, cell.bench))
        if kind == "passk":
            return str(folder / f"{cell.bench}.passk.json")
        return str(folder.parent / "efficiency.json")

    def leaves(self, kind: str) -> list[str]:
        """Returns the outputs of every supported cell of blocks of ``kind``, sorted and unique."""
        return sorted({self.leaf(cell, kind) for cell in self.cells(kind)})

    def targets(self, stage: str) -> list[str]:
        """Returns the outputs of one stage of the study, sorted.

        Args:
            stage: ``full_context`` (base at budget 1.0), ``sweep`` (base under a pruner), ``train``
                (checkpoint markers), ``trained`` (results of trained checkpoints), ``passk``, ``efficiency``.
        """
        table = self.cells("table")
        by_stage = {
            "full_context": [self.leaf(c) for c in table if c.method == BASE and c.budget == 1.0],
            "sweep": [self.leaf(c) for c in table if c.method == BASE and c.budget < 1.0],
            "trained": [self.leaf(c) for c in table if c.method != BASE],
            "train": [self.checkpoint_marker(r) for r in self.train_runs],
            "passk": self.leaves("passk"),
            "efficiency": self.leaves("efficiency"),
        }
        return sorted(set(by_stage[stage]))

    def reference_leaf(self, model: str, bench: str) -> str:
        """Returns the full-context greedy result of ``model`` on ``bench`` (Pass@K's cohort source)."""
        return self.leaf(Cell(model, BASE, self.reference_pruner, 1.0, bench))

    def checkpoint_dir(self, run: TrainRun) -> str:
        """Returns the final checkpoint directory of ``run`` (what ``checkpoint=`` points at)."""
        folder = run_dir("runs", self.experiment, run.model, run.method, run.pruner, run.budget)
        return str(folder / "checkpoint")

    def checkpoint_marker(self, run: TrainRun) -> str:
        """Returns the train rule's declared output for ``run``."""
        return f"{self.checkpoint_dir(run)}/{CHECKPOINT_MARKER}"

    def checkpoint_inputs(self, cell: Cell) -> list[str]:
        """Returns the checkpoint marker ``cell`` evaluates as an input list ([] for the untrained model)."""
        return [] if cell.method == BASE else [self.checkpoint_marker(self.train_run(cell))]

    def tables_dir(self) -> str:
        """Returns the directory ``make_tables.py`` writes."""
        return TABLES_PATTERN.format(experiment=self.experiment)

    def data_dir(self, conf_dir: str | Path = CONF_DIR) -> str | None:
        """Returns the folder the pipeline's data job writes, ``data/<config>-<digest>``; None if none is built.

        The digest covers the data config and the grid's ``build_data`` overrides, so data built by hand
        (``python src/build_data.py`` writes ``data/<config>/``) or under other overrides is never taken
        for this grid's: a prebuilt suite of another size cannot make Snakemake skip the data job.
        """
        if not self.data["build"]:
            return None
        name = self.data["config"]
        spec = {
            "data": load_yaml(Path(conf_dir) / "data" / f"{name}.yaml"),
            "overrides": self.overrides("build_data"),
        }
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]
        return f"data/{name}-{digest}"

    def data_files(self, conf_dir: str | Path = CONF_DIR) -> dict[str, str]:
        """Returns name -> TSV that the data job writes (benchmarks, ``train``) in ``data_dir``; {} if none."""
        out_dir = self.data_dir(conf_dir)
        if out_dir is None:
            return {}
        data_cfg = load_yaml(Path(conf_dir) / "data" / f"{self.data['config']}.yaml")
        files = {name: f"{out_dir}/{name}.tsv" for name in [*data_cfg["benches"], "train"]}
        unbuilt = sorted(set(self.names("bench")) - set(files))
        if unbuilt:
            where = f"conf/data/{self.data['config']}.yaml"
            raise ValueError(f"grid benchmarks {unbuilt} are not among the benches of {where}")
        return files

    def data_args(self, stage: str, bench: str = "") -> list[str]:
        """Returns the overrides pointing ``stage`` at the data job's files ([] when no data is built).

        ``build_data`` and ``train`` get ``data.out_dir``; an evaluation gets ``bench.<bench>.path``.
        """
        out_dir = self.data_dir()
        if out_dir is None:
            return []
        if stage in ("build_data", "train"):
            return [f"data.out_dir={out_dir}"]
        return [f"bench.{bench}.path={self.data_files()[bench]}"]

    # ---- CLI overrides -----------------------------------------------------------------------------------
    def overrides(self, stage: str) -> list[str]:
        """Returns the extra Hydra overrides of ``stage``: the grid's, then the Snakemake config's."""
        return list(self._overrides[stage])

    def _point_args(self, cell: Cell, method_key: str) -> list[str]:
        # base (untrained) is never trained and is evaluate.py's default: there is no conf/method/base.yaml
        method = [] if cell.method == BASE else [f"{method_key}={cell.method}"]
        args = [f"experiment={self.experiment}", f"model={cell.model}", *method]
        return args + [f"pruner={cell.pruner}", f"budget={budget_tag(cell.budget)}", f"seed={self.seed}"]

    def _checkpoint_args(self, cell: Cell) -> list[str]:
        return [] if cell.method == BASE else [f"checkpoint={self.checkpoint_dir(self.train_run(cell))}"]

    def train_command(self) -> list[str]:
        """Returns the command before ``train.py``'s overrides (``accelerate launch`` for several GPUs)."""
        python, script = entry_point("train.py")
        gpus = self.resources["train"]["gpu"]
        launch = [] if gpus <= 1 else ["-m", "accelerate.commands.launch", "--num_processes", str(gpus)]
        return [python, *launch, script]

    def train_args(self, run: TrainRun) -> list[str]:
        """Returns the ``train.py`` overrides of ``run``."""
        cell = Cell(run.model, run.method, run.pruner, run.budget, "")
        args = self._point_args(cell, "method") + self.data_args("train")
        return args + self.overrides("train") + list(self.methods[run.method].overrides)

    def evaluate_args(self, cell: Cell, mode: str = "greedy") -> list[str]:
        """Returns the ``evaluate.py`` overrides of ``cell`` in ``mode`` (``greedy`` or ``passk``)."""
        args = [
            *self._point_args(cell, EVAL_METHOD_KEY),
            f"bench={cell.bench}",
            *self.data_args(mode, cell.bench),
        ]
        args += self._checkpoint_args(cell)
        if mode == "passk":
            full = Path(self.reference_leaf(cell.model, cell.bench)).parent
            args += ["mode=passk", f"passk.full_context_leaf={full}"]
        return args + self.overrides("evaluate" if mode == "greedy" else mode)

    def efficiency_args(self, run: EfficiencyRun) -> list[str]:
        """Returns the ``evaluate.py mode=efficiency`` overrides of ``run`` (``budget`` names a folder)."""
        budgets = ",".join(budget_tag(b) for b in run.budgets)
        cell = run.cell
        args = [
            *self._point_args(cell, EVAL_METHOD_KEY),
            f"bench={run.bench}",
            *self.data_args("efficiency", run.bench),
        ]
        args += [
            *self._checkpoint_args(cell),
            "mode=efficiency",
            f"efficiency.bench={run.bench}",
            f"efficiency.budgets=[{budgets}]",
        ]
        return args + self.overrides("efficiency")


def entry_point(script: str, cwd: str | Path | None = None) -> list[str]:
    """Returns ``[python, src/<script>]`` relative to ``cwd`` (default: the current directory).

    Relative paths keep rule params stable when the checkout moves (a changed param reruns every job), and
    the interpreter is the one running Snakemake (the project's venv), whatever comes first on PATH.
    """
    here = Path.cwd() if cwd is None else Path(cwd)
    return [os.path.relpath(sys.executable, here), os.path.relpath(REPO_DIR / "src" / script, here)]


def mirror(pattern: str, root: str, stage: str, suffix: str) -> str:
    """Returns ``pattern`` moved under ``root/stage`` with ``suffix`` as its extension (log, benchmark).

    ``results/{experiment}/.../{bench}.json`` -> ``logs/evaluate/{experiment}/.../{bench}.log``.
    """
    path = pattern.removeprefix("results/").removeprefix("runs/")
    for ext in (f"/checkpoint/{CHECKPOINT_MARKER}", ".passk.json", ".json"):
        path = path.removesuffix(ext)
    return f"{root}/{stage}/{path}{suffix}"


def cell_of(wildcards: Mapping[str, str]) -> Cell:
    """Returns the cell a Snakemake job's wildcards name."""
    w = wildcards
    return Cell(w["model"], w["method"], w["pruner"], float(w["budget"]), w["bench"])


def run_of(wildcards: Mapping[str, str]) -> TrainRun:
    """Returns the training run a Snakemake job's wildcards name."""
    w = wildcards
    return TrainRun(w["model"], w["method"], w["pruner"], float(w["budget"]))
