"""The files a study reads from the user, declared as Snakemake inputs of the jobs that read them.

A study on the user's inputs (``grid.data.build: false``) reads VLMEvalKit's benchmark TSVs, found as
``sparsectx.eval.protocol.bench_files`` finds them (``bench.<name>.path``, else ``$LMUData`` / ``~/LMUData``, then
``data/``), and a training file (``train_data.path``). Each job's file(s) are resolved from the config its command
composes (``sparsectx.plan.compose``: the plan composes the same command lines while Snakemake builds the DAG, so
the compositions are shared). Each GPU job declares the file(s) it reads, and the preflight every one:

- a missing one stops the DAG, ``snakemake -n`` included, before anything is queued: the preflight's input
  function raises naming every missing file, the benchmark (or training file), the stages whose jobs read it and
  the setting that points at it. Every train and evaluation job waits for the preflight, so the error reaches the
  user whenever such a job's output is missing; a job whose output exists keeps it, as Snakemake ignores a failed
  producer of an existing file (``snakemake.dag.DAG.update_``). The GPU jobs' own input functions never raise
  (an error there would propagate past existing outputs, ``DAG.collect_potential_dependencies``): a missing file is
  declared where it is looked for first, a missing input Snakemake reports itself;
- a changed one (newer than a result) is seen by Snakemake, which reruns the jobs that read it.

On a grid whose data job writes the files (the tiny studies) the inputs are that job's outputs (``Grid.data_files``).
Input functions run only while a DAG is built (not for ``--unlock`` or ``--lint``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from sparsectx.paths import BASE
from sparsectx.workflow.cells import Cell, EfficiencyRun, TrainRun
from sparsectx.workflow.config import CONF_DIR
from sparsectx.workflow.grid import Grid

if TYPE_CHECKING:
    from sparsectx.eval.config import BenchSpec


def bench_problem(spec: BenchSpec, places: str) -> tuple[str, str]:
    """Returns (what is missing, the setting that points at it) for benchmark ``spec`` whose file(s) are not at
    ``places``."""
    subject = f"benchmark {spec.name} ({spec.dataset_name}): no {' + '.join(spec.layout.files)} at {places}"
    return subject, f"bench.{spec.name}.path=<file or folder>"


def train_problem(path: str) -> tuple[str, str]:
    """Returns (what is missing, the setting that points at it) for a training file that is not there, with the
    recipe that writes it (``sparsectx.preflight.training.training_recipes``)."""
    from sparsectx.preflight.training import training_recipes

    recipes = " or ".join(
        f"`python src/build_data.py data/sources={name}`" for name, _ in training_recipes(path, CONF_DIR)
    )
    how = f"build it with {recipes}" if recipes else "write it in the TSV layout of docs/training_data.md"
    return f"training file {path} (train_data.path): not found ({how})", "train_data.path=<file>"


def looked_at(spec: BenchSpec) -> list[Path]:
    """Returns where ``protocol.bench_files`` looks for the benchmark's file(s), in its order: ``bench.<name>.path``
    (a file, or a folder holding ``layout.files``), else ``$LMUData`` (``~/LMUData``) then ``data/``, each holding
    every file of ``layout.files``."""
    from sparsectx.eval.protocol import lmu_data_root

    names = spec.layout.files
    if spec.path is not None:
        given = Path(spec.path)
        return [given / name for name in names] if given.is_dir() else [given]
    return [folder / name for folder in (lmu_data_root(), Path("data")) for name in names]


class UserFiles:
    """The user's files of one study's jobs, each resolved from its job's composed config once.

    ``check`` resolves every scheduled job's; a job asked for later (a target outside the grid's cells) is
    resolved when asked. A lookup never raises: a missing file is recorded in ``missing`` (``raise_missing``).
    """

    def __init__(self, grid: Grid) -> None:
        self.grid = grid
        self._files: dict[tuple[str, object, str], list[str]] = {}
        self._blocks: dict[tuple[str, str], list[str]] = {}
        """(stage, composed ``bench.<name>`` block as JSON) -> its file(s): the models of a stage that compose the
        same block share one ``BenchSpec`` (~15 ms each) and one look-up."""
        self.missing: dict[tuple[str, str], list[str]] = {}
        """(what is missing, the setting that points at it) -> the stages whose jobs read it."""

    def bench(self, stage: str, model: str, name: str, run: EfficiencyRun | None = None) -> list[str]:
        """Returns the file(s) of benchmark ``name`` as the ``stage`` jobs (``evaluate``, ``passk``, ``efficiency``
        of ``run``) of ``model`` compose it; a missing one is recorded in ``missing``."""
        from omegaconf import OmegaConf

        from sparsectx.plan.compose import efficiency_config, eval_config

        key = (stage, run or model, name)
        if key not in self._files:
            if stage == "efficiency":
                cfg = efficiency_config(self.grid, run)
            else:  # greedy: every benchmark of a model in one composition (the plan's); Pass@K: one per benchmark
                cfg = eval_config(self.grid, model, "greedy" if stage == "evaluate" else stage, name)
            block = json.dumps(OmegaConf.to_container(cfg.bench[name], resolve=True), sort_keys=True)
            if (stage, block) not in self._blocks:
                self._blocks[(stage, block)] = self._block_files(block, stage)
            self._files[key] = self._blocks[(stage, block)]
        return self._files[key]

    def _block_files(self, block: str, stage: str) -> list[str]:
        """Returns the file(s) of one composed ``bench.<name>`` block (JSON), or where they are looked for first
        when missing (recorded in ``missing``)."""
        from sparsectx.eval.config import bench_spec_from
        from sparsectx.eval.protocol import bench_files

        spec = bench_spec_from(json.loads(block))
        try:
            return [str(path) for path in bench_files(spec)]
        except FileNotFoundError:
            places = looked_at(spec)
            where = ", ".join(str(path.resolve()) for path in places)
            self.missing.setdefault(bench_problem(spec, where), []).append(stage)
            return [str(path) for path in places[: len(spec.layout.files)]]

    def train(self, run: TrainRun) -> list[str]:
        """Returns the training file of ``run`` (its composed ``train_data.path``, the same for every seed); a
        missing one is recorded in ``missing``."""
        from sparsectx.plan.compose import train_config

        key = ("train", run, "")
        if key not in self._files:
            path = str(train_config(self.grid, run).train_data.path)
            if not Path(path).is_file():
                self.missing.setdefault(train_problem(path), []).append("train")
            self._files[key] = [path]
        return self._files[key]

    def check(self) -> None:
        """Resolves the files of every scheduled job (``raise_missing`` then names every missing one at once)."""
        grid = self.grid
        references = [Cell(c.model, BASE, grid.reference_pruner, 1.0, c.bench) for c in grid.cells("passk")]
        for cell in grid.cells("table") + references:  # greedy jobs: the tables' and Pass@K's full-context cohort
            self.bench("evaluate", cell.model, cell.bench)  # a per-leaf job reads its cells' benchmarks
        for cell in grid.cells("passk"):
            self.bench("passk", cell.model, cell.bench)
        for run in grid.efficiency_runs:
            self.bench("efficiency", run.model, run.bench, run)
        for train_run in grid.train_runs:
            self.train(train_run)

    def all_files(self) -> list[str]:
        """Returns every file resolved so far, sorted and unique (after ``check``: the preflight's inputs)."""
        return sorted({path for paths in self._files.values() for path in paths})

    def raise_missing(self) -> None:
        """Returns None when every file resolved so far is there; else raises naming each missing one.

        Raises:
            ValueError: one line per missing file: the file, where it was looked for, the stages whose jobs read
                it and the setting to change (``bench.<name>.path=``, ``train_data.path=``; ``$LMUData``).
        """
        if not self.missing:
            return
        experiment = self.grid.experiment
        lines = []
        for (subject, setting), stages in self.missing.items():
            named = " and ".join(dict.fromkeys(stages))
            lines.append(f"{subject}; read by the {named} jobs: set {setting} in the {named} overrides")
        # $LMUData reaches every job: local jobs inherit Snakemake's environment, and the SLURM executor plugin
        # submits with --export=ALL (snakemake_executor_plugin_slurm/submit_string.py, 2.8.0)
        raise ValueError(
            f"experiment {experiment}: {len(lines)} input file(s) missing, nothing was queued. Put each where it is "
            "looked for, set $LMUData (in the environment Snakemake runs in; its jobs inherit it) to the folder "
            "holding VLMEvalKit's files, or set the setting named below in grid.overrides.<stage> of "
            f"conf/experiment/{experiment}.yaml or hydra_overrides.<stage> of a --configfile "
            f"(`python src/preflight.py experiment={experiment} --list` says how to get each file):\n  "
            + "\n  ".join(lines)
        )


@cache
def resolved_files(grid: Grid) -> UserFiles:
    """Returns the user's files of every scheduled job of ``grid``, resolved once per grid (missing ones recorded,
    so the many jobs of a study never resolve them again)."""
    files = UserFiles(grid)
    files.check()
    return files


def preflight_inputs(grid: Grid) -> list[str]:
    """Returns every file of the user's the study's jobs read: the preflight's inputs.

    Raises:
        ValueError: a file is missing (``UserFiles.raise_missing``: every missing one at once).
    """
    files = resolved_files(grid)
    files.raise_missing()
    return files.all_files()


def greedy_inputs(grid: Grid, data: Mapping[str, str], cell: Cell) -> list[str]:
    """Returns the benchmark file(s) the greedy evaluation job of ``cell`` reads: the data job's (``data``,
    ``Grid.data_files``), or the user's (``resolved_files``)."""
    if not grid.preflight:
        return grid.bench_inputs(cell, data)
    files = resolved_files(grid)
    return [path for name in grid.job_benches(cell) for path in files.bench("evaluate", cell.model, name)]


def passk_inputs(grid: Grid, data: Mapping[str, str], cell: Cell) -> list[str]:
    """Returns the benchmark file(s) the Pass@K job of ``cell`` reads (the data job's, or the user's)."""
    if not grid.preflight:
        return [data[cell.bench]] if cell.bench in data else []
    return resolved_files(grid).bench("passk", cell.model, cell.bench)


def efficiency_inputs(grid: Grid, data: Mapping[str, str], run: EfficiencyRun) -> list[str]:
    """Returns the benchmark file(s) the efficiency job of ``run`` reads (the data job's, or the user's)."""
    if not grid.preflight:
        return [data[run.bench]] if run.bench in data else []
    return resolved_files(grid).bench("efficiency", run.model, run.bench, run)


def train_inputs(grid: Grid, data: Mapping[str, str], run: TrainRun) -> list[str]:
    """Returns the training file the train jobs of ``run`` read, whatever their seed (the data job's ``train``, or
    the composed ``train_data.path``)."""
    if not grid.preflight:
        return [data["train"]] if "train" in data else []
    return resolved_files(grid).train(run)
