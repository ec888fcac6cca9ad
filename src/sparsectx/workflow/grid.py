"""Which leaves an experiment has: the cells of its grid, the runs behind them, and where each output lives.

``Grid`` expands a checked ``grid:`` mapping (``sparsectx.workflow.parse`` reads and cross-checks it): the
supported cells the Snakefile schedules, the declared cells that cannot run (``missing_cells``, with every
reason), the training and efficiency runs, the wildcard values, and each output's path. The command lines of
the jobs are built in ``sparsectx.workflow.commands``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sparsectx.hashing import config_hash
from sparsectx.paths import BASE, budget_tag, leaf_dir, result_path, run_dir
from sparsectx.workflow.cells import (
    CHECKPOINT_MARKER,
    PLAN_PATTERN,
    PREFLIGHT_PATTERN,
    SEED_FOLDER,
    STAGES,
    TABLES_PATTERN,
    Block,
    Cell,
    EfficiencyRun,
    MissingCell,
    TrainRun,
)
from sparsectx.workflow.config import CONF_DIR, load_yaml, resolve_config, validate_config
from sparsectx.workflow.parse import (
    check_blocks,
    check_names,
    check_presets,
    check_tables_overrides,
    declared,
    parse_blocks,
    parse_methods,
    parse_sweeps,
    parse_train_seeds,
)
from sparsectx.workflow.rehearsal import Rehearsal
from sparsectx.workflow.report_specs import parse_report


def load_grid(
    experiment: str, grid_replacements: Mapping[str, Any] | None = None, conf_dir: str | Path = CONF_DIR
) -> Grid:
    """Returns the checked grid of ``conf/experiment/<experiment>.yaml`` (keys replaced as in
    ``resolve_config``)."""
    config = {"experiment": experiment, "grid": dict(grid_replacements or {}), "hydra_overrides": {}}
    resolved = resolve_config(config, conf_dir)
    validate_config(resolved)
    return Grid(experiment, resolved["grid"])


def check_tables_seeds(grid: Grid, conf_dir: str | Path = CONF_DIR) -> None:
    """Returns None when ``make_tables.py`` will find every seed of ``grid.train_seeds`` it is asked for; else
    raises naming ``grid.train_seeds``, before any job runs.

    ``make_tables.py experiment=<e>`` reads the preset's own grid, not the keys a ``--configfile`` replaced, and
    refuses a training seed with no result for a trained method of the preset's tables. A replaced ``tables``
    that drops such a method therefore cannot pool several seeds.
    """
    if not grid.extra_seeds:
        return
    trained = {c.method for c in grid.seeded_cells}
    lacking = sorted({c.method for c in load_grid(grid.experiment, conf_dir=conf_dir).seeded_cells} - trained)
    if lacking:
        raise ValueError(
            f"grid.train_seeds={list(grid.train_seeds)}: make_tables reads the tables of "
            f"conf/experiment/{grid.experiment}.yaml, whose trained methods {lacking} this grid never trains, "
            f"and would refuse those seeds after every job ran; keep those methods in the replaced grid.tables, "
            f"or set grid.train_seeds=[{grid.seed}] (one seed) for a reduced grid"
        )


def missing_cells(experiment: str | Grid) -> list[MissingCell]:
    """Returns every declared-but-unsupported cell of an experiment with its reason (the footnotes)."""
    grid = experiment if isinstance(experiment, Grid) else load_grid(experiment)
    return grid.missing_cells()


def stop_signal_option(lead_s: int) -> str:
    """Returns the sbatch option asking SLURM for SIGTERM ``lead_s`` seconds before a job's time limit (sbatch(1),
    ``--signal=[{R|B}:]<sig_num>[@sig_time]``; without ``B:`` it reaches the job steps, where the jobstep plugin's
    ``srun`` runs the trainer). SLURM may send it up to 60 s earlier than asked (sbatch(1))."""
    return f"--signal=TERM@{lead_s}"


def on_one_node(resources: Mapping[str, Any]) -> dict[str, Any]:
    """Returns a rule's ``resources`` asking for one node (``nodes: 1``, which the executor plugin submits as
    ``--nodes=1``): sbatch(1) may spread ``--gpus=<n>`` over several nodes, while a job's processes are started on
    its first node (``torch.distributed.run --standalone``)."""
    return {**resources, "nodes": 1}


def flat_resources(grid: Grid, plan_grid: Grid, stage: str, outputs: Sequence[str]) -> dict[str, Any]:
    """Returns ``grid.resources[stage]`` as a rule's resources, its runtime the grid's flat one: the tiny studies,
    which have no plan (``sparsectx.plan.dag.planned_resources`` has the same signature for real studies). A
    training job asks for SIGTERM conf/plan.yaml's ``stop_signal.margin_s`` before its limit (it saves fast)."""
    resources = on_one_node(grid.resources[stage])
    if stage == "train":
        margin = load_yaml(Path(CONF_DIR) / "plan.yaml")["stop_signal"]["margin_s"]
        resources["slurm_extra"] = stop_signal_option(min(margin, resources["runtime"] * 60 // 2))
    return resources


def check_data(data: dict[str, Any]) -> dict[str, Any]:
    """Returns ``grid.data`` (keys checked by the schema) after checking that its optional ``video``, a synthetic
    video family whose benchmark the data job writes beside the suite, has its ``conf/data/video/`` file."""
    video = data.get("video")
    if video is not None and not (Path(CONF_DIR) / "data" / "video" / f"{video}.yaml").is_file():
        raise ValueError(f"grid.data.video={video!r}: no conf/data/video/{video}.yaml")
    return data


class Grid:
    """The leaves of one experiment; dangling names and clashing outputs raise on construction.

    Args:
        experiment: The preset's file stem; must equal ``grid["name"]``.
        grid: The ``grid:`` mapping, already checked by ``validate_config``.
        extra_overrides: Stage -> Hydra overrides appended after the grid's own (the Snakemake config's
            ``hydra_overrides``; tests shorten runs with it).
        model_paths: Model -> local checkpoint folder (the Snakemake config's ``model_paths``): every job of
            that model gets ``model.path=<folder>``.
        rehearsal: The rehearsal's scaling (``sparsectx.workflow.rehearsal``), or None for the real study.
    """

    def __init__(
        self,
        experiment: str,
        grid: Mapping[str, Any],
        extra_overrides: Mapping[str, list[str]] | None = None,
        model_paths: Mapping[str, str] | None = None,
        rehearsal: Rehearsal | None = None,
    ) -> None:
        if grid["name"] != experiment:
            raise ValueError(f"grid.name={grid['name']!r} must equal the preset's file stem {experiment!r}")
        self.experiment = experiment
        self.models = declared(grid["models"])
        self.model_pruners: dict[str, dict[str, str]] = {
            name: dict((spec or {}).get("unsupported_pruners", {})) for name, spec in grid["models"].items()
        }
        """Model -> {pruner: reason} for pruners that model's family cannot run (e.g. in-LLM on a hybrid)."""
        self.model_overrides: dict[str, tuple[str, ...]] = {
            name: tuple((spec or {}).get("overrides", ())) for name, spec in grid["models"].items()
        }
        """Model -> Hydra overrides of every job of that model (before the stage's and the method's)."""
        self.model_train_overrides: dict[str, tuple[str, ...]] = {
            name: tuple((spec or {}).get("train_overrides", ())) for name, spec in grid["models"].items()
        }
        """Model -> Hydra overrides of that model's training jobs only (after ``model_overrides``)."""
        self.pruners = declared(grid["pruners"])
        self.benchmarks = declared(grid["benchmarks"])
        self.methods = parse_methods(grid["methods"])
        check_presets(self.methods, CONF_DIR)
        self.reference_pruner: str = grid["reference_pruner"]
        self.seed: int = grid["seed"]
        self.train_seeds = parse_train_seeds(grid["train_seeds"], self.seed)
        """Training seeds of the tables' trained cells, as listed; ``grid.seed`` among them."""
        self.rehearsal = rehearsal
        self.resources: dict[str, dict[str, int]] = (
            grid["resources"] if rehearsal is None else rehearsal.resources(grid["resources"])
        )
        self.data: dict[str, Any] = check_data(grid["data"])
        self.eval_jobs: str = grid.get("eval_jobs", "benchmark")
        """``benchmark``: one greedy evaluation job per (leaf, benchmark); ``leaf``: one per leaf, writing the
        benchmarks of ``greedy_leaves`` in one process (a checkpoint loaded and the start-up paid once per leaf;
        ``sparsectx.workflow.eval_jobs``)."""
        extra = extra_overrides or {}
        self._overrides = {s: [*grid["overrides"].get(s, []), *extra.get(s, [])] for s in STAGES}
        self.model_paths = {str(k): str(v) for k, v in (model_paths or {}).items()}
        """Model -> local checkpoint folder replacing its ``conf/model`` preset's ``model.path``."""
        check_tables_overrides(self._overrides["tables"])
        self.blocks = tuple(parse_blocks(grid))
        self.sweeps = parse_sweeps(grid)
        """Name -> the ``Sweep`` of each ``tables`` entry of ``kind: sweep`` (also a table block of its rows)."""
        check_names(self)
        self._cells = {b.name: self._block_cells(b) for b in self.blocks}
        check_blocks(self)
        self.train_runs = sorted({self.train_run(c) for c in self.cells() if c.method != BASE})
        """Every training run a supported cell evaluates, sorted."""
        self.efficiency_runs = self._efficiency_runs()
        """One run per (model, method, pruner) of the supported efficiency cells, sorted."""
        self.seeded_cells = [c for c in self.cells("table") if c.method != BASE]
        """The trained cells of the tables: evaluated once per seed of ``extra_seeds`` besides ``grid.seed``."""
        self.seeded_runs = sorted({self.train_run(c) for c in self.seeded_cells})
        """The training runs behind ``seeded_cells``: trained once per seed of ``extra_seeds`` as well."""
        self.greedy_leaves = self._greedy_leaves()
        """Leaf (a cell with ``bench`` empty) -> the benchmarks its greedy results are needed on: its table cells'
        and, for the full-context reference leaf, the Pass@K cells' (their cohort), sorted."""
        self.report = parse_report(grid.get("report") or {}, self)
        """Name -> the ``grid.report`` entries: tables and figures of files the other blocks' jobs write."""

    @property
    def extra_seeds(self) -> list[int]:
        """Returns the training seeds other than ``grid.seed``, as listed (each has its ``seed<s>/`` trees)."""
        return [s for s in self.train_seeds if s != self.seed]

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
                parts.append(("training pruner", f"{method.pruner} on {cell.model}", on_model.get(method.pruner)))
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
            "seed": {str(s) for s in self.extra_seeds},
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
        wanted += [("method", self.methods[r.method].preset) for r in self.train_runs]
        paths = sorted({Path(conf_dir) / group / f"{name}.yaml" for group, name in wanted})
        return [str(p) for p in paths if not p.is_file()]

    # ---- evaluation jobs -----------------------------------------------------------------------------
    def eval_benches(self) -> list[str]:
        """Returns every benchmark a greedy evaluation job writes: each supported benchmark of the table and
        Pass@K blocks (the efficiency block reads its benchmark itself), sorted."""
        named = {b for block in self.blocks if block.kind != "efficiency" for b in block.benchmarks}
        return sorted(b for b in named if self.benchmarks[b] is None)

    def _greedy_leaves(self) -> dict[Cell, tuple[str, ...]]:
        leaves: dict[Cell, set[str]] = {}
        references = [Cell(c.model, BASE, self.reference_pruner, 1.0, c.bench) for c in self.cells("passk")]
        for cell in self.cells("table") + references:
            leaves.setdefault(Cell(cell.model, cell.method, cell.pruner, cell.budget, ""), set()).add(cell.bench)
        return {leaf: tuple(sorted(benches)) for leaf, benches in sorted(leaves.items())}

    def job_benches(self, cell: Cell) -> list[str]:
        """Returns the benchmarks the greedy evaluation job of ``cell`` writes: its own, or (per-leaf jobs,
        ``cell.bench`` empty) those its leaf needs (``greedy_leaves``)."""
        return [cell.bench] if cell.bench else list(self.greedy_leaves[cell])

    def bench_inputs(self, cell: Cell, data: Mapping[str, str]) -> list[str]:
        """Returns the benchmark TSVs the greedy evaluation job of ``cell`` reads, from ``data`` (name -> file,
        ``data_files()``); a benchmark the data job does not write has none here (the user's files of a study on
        real inputs are declared by ``sparsectx.workflow.inputs``)."""
        return [data[name] for name in self.job_benches(cell) if name in data]

    # ---- paths -------------------------------------------------------------------------------------------
    def seed_root(self, root: str, seed: int | None = None) -> str:
        """Returns the tree of training seed ``seed`` under ``root`` (``results`` or ``runs``): ``root`` itself
        for ``grid.seed`` (or None), else ``root/seed<s>`` (``sparsectx.report.seeds.seed_root``'s layout)."""
        return root if seed in (None, self.seed) else f"{root}/{SEED_FOLDER.format(seed=seed)}"

    def leaf(self, cell: Cell, kind: str = "table", seed: int | None = None) -> str:
        """Returns the output of ``cell`` in a block of ``kind`` (efficiency: the file of its run), for the
        checkpoint of training seed ``seed`` (None: ``grid.seed``)."""
        root = self.seed_root("results", seed)
        folder = leaf_dir(root, self.experiment, cell.model, cell.method, cell.pruner, cell.budget)
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
                ``train`` and ``trained`` hold every seed of ``grid.train_seeds``.
        """
        table = self.cells("table")
        extra = self.extra_seeds
        by_stage = {
            "full_context": [self.leaf(c) for c in table if c.method == BASE and c.budget == 1.0],
            "sweep": [self.leaf(c) for c in table if c.method == BASE and c.budget < 1.0],
            "trained": [self.leaf(c) for c in self.seeded_cells]
            + [self.leaf(c, seed=s) for s in extra for c in self.seeded_cells],
            "train": [self.checkpoint_marker(r) for r in self.train_runs]
            + [self.checkpoint_marker(r, s) for s in extra for r in self.seeded_runs],
            "passk": self.leaves("passk"),
            "efficiency": self.leaves("efficiency"),
        }
        return sorted(set(by_stage[stage]))

    def reference_leaf(self, model: str, bench: str) -> str:
        """Returns the full-context greedy result of ``model`` on ``bench`` (Pass@K's cohort source)."""
        return self.leaf(Cell(model, BASE, self.reference_pruner, 1.0, bench))

    def checkpoint_dir(self, run: TrainRun, seed: int | None = None) -> str:
        """Returns the final checkpoint directory of ``run`` trained with ``seed`` (None: ``grid.seed``), what
        ``checkpoint=`` points at."""
        root = self.seed_root("runs", seed)
        folder = run_dir(root, self.experiment, run.model, run.method, run.pruner, run.budget)
        return str(folder / "checkpoint")

    def checkpoint_marker(self, run: TrainRun, seed: int | None = None) -> str:
        """Returns the train rule's declared output for ``run`` trained with ``seed`` (None: ``grid.seed``)."""
        return f"{self.checkpoint_dir(run, seed)}/{CHECKPOINT_MARKER}"

    def checkpoint_inputs(self, cell: Cell, seed: int | None = None) -> list[str]:
        """Returns the checkpoint marker ``cell`` evaluates (trained with ``seed``, None: ``grid.seed``) as an
        input list ([] for the untrained model)."""
        return [] if cell.method == BASE else [self.checkpoint_marker(self.train_run(cell), seed)]

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
        name, video = self.data["config"], self.data.get("video")
        spec = {
            "data": load_yaml(Path(conf_dir) / "data" / f"{name}.yaml"),
            "overrides": self.overrides("build_data"),
        }
        if video is not None:  # only then, so grids without a video family keep their folders
            spec["video"] = load_yaml(Path(conf_dir) / "data" / "video" / f"{video}.yaml")
        return f"data/{name}-{config_hash(spec, digits=10)}"

    def data_files(self, conf_dir: str | Path = CONF_DIR) -> dict[str, str]:
        """Returns name -> TSV that the data job writes (benchmarks, ``train``) in ``data_dir``; {} if none."""
        out_dir = self.data_dir(conf_dir)
        if out_dir is None:
            return {}
        data_cfg = load_yaml(Path(conf_dir) / "data" / f"{self.data['config']}.yaml")
        video = [] if self.data.get("video") is None else [self.data["video"]]
        files = {name: f"{out_dir}/{name}.tsv" for name in [*data_cfg["benches"], *video, "train"]}
        unbuilt = sorted(set(self.names("bench")) - set(files))
        if unbuilt:
            where = f"conf/data/{self.data['config']}.yaml"
            raise ValueError(
                f"grid benchmarks {unbuilt} are not among the benches of {where} nor grid.data.video "
                f"({self.data.get('video')!r})"
            )
        return files

    # ---- preflight ------------------------------------------------------------------------------------
    @property
    def preflight(self) -> bool:
        """Whether the study starts with the preflight: when its inputs are the user's (``grid.data.build``
        false: real checkpoints, VLMEvalKit's benchmark files, a training file). A grid whose data job writes
        its benchmarks (the tiny studies, on the shipped model) has nothing of the user's to check."""
        return not self.data["build"]

    def plan_output(self) -> str:
        """Returns the plan job's output (``results/<experiment>/plan.md``), the preflight's input."""
        return PLAN_PATTERN.format(experiment=self.experiment)

    def preflight_output(self) -> str:
        """Returns the preflight job's output (its JSON report)."""
        return PREFLIGHT_PATTERN.format(experiment=self.experiment)

    def preflight_inputs(self) -> list[str]:
        """Returns what every train and evaluation job waits for: the preflight's report ([] without one)."""
        return [self.preflight_output()] if self.preflight else []

    def train_files(self) -> list[str]:
        """Returns the training file the train jobs read when the grid sets one (``train_data.path=`` among its
        train overrides); [] when no job trains or the data job writes it."""
        if not self.train_runs:
            return []
        paths = [o.split("=", 1)[1] for o in self.overrides("train") if o.startswith("train_data.path=")]
        return paths[-1:]

    # ---- CLI overrides ---------------------------------------------------------------------------------
    def overrides(self, stage: str) -> list[str]:
        """Returns the extra Hydra overrides of ``stage``: the grid's, then the Snakemake config's."""
        return list(self._overrides[stage])

    def final_overrides(self, stage: str, benches: Iterable[str] = ()) -> list[str]:
        """Returns what comes last on a ``stage`` job's command reading ``benches``: the rehearsal's scaling
        ([] in the real study)."""
        return [] if self.rehearsal is None else self.rehearsal.stage_overrides(stage, benches)
