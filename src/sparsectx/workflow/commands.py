"""The command line of each job: the entry point a user types and its Hydra overrides, from the grid.

Each Snakemake rule's ``params`` are these lists; they never hold random or time values, so a rerun of an
unchanged grid finds every param unchanged (snakemake#1694).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path

from sparsectx.paths import BASE, budget_tag
from sparsectx.workflow.cells import EVAL_METHOD_KEY, Cell, EfficiencyRun, TrainRun
from sparsectx.workflow.config import REPO_DIR, load_yaml
from sparsectx.workflow.grid import Grid


def entry_point(script: str, cwd: str | Path | None = None) -> list[str]:
    """Returns ``[python, src/<script>]`` relative to ``cwd`` (default: the current directory).

    Relative paths keep rule params stable when the checkout moves (a changed param reruns every job), and
    the interpreter is the one running Snakemake (the project's venv), whatever comes first on PATH.
    """
    here = Path.cwd() if cwd is None else Path(cwd)
    return [os.path.relpath(sys.executable, here), os.path.relpath(REPO_DIR / "src" / script, here)]


def data_args(grid: Grid, stage: str, bench: str = "") -> list[str]:
    """Returns the overrides pointing ``stage`` at the data job's files ([] when no data is built).

    ``build_data`` and ``train`` get ``data.out_dir`` (``build_data`` also ``data/video=<grid.data.video>``);
    an evaluation gets ``bench.<name>.path`` for each name of the comma-separated ``bench``.
    """
    out_dir = grid.data_dir()
    if out_dir is None:
        return []
    if stage == "build_data" and grid.data.get("video") is not None:
        return [f"data.out_dir={out_dir}", f"data/video={grid.data['video']}"]
    if stage in ("build_data", "train"):
        return [f"data.out_dir={out_dir}"]
    files = grid.data_files()
    return [f"bench.{name}.path={files[name]}" for name in bench.split(",")]


def _point_args(grid: Grid, cell: Cell, method_key: str, seed: int) -> list[str]:
    # base (untrained) is never trained and is evaluate.py's default: there is no conf/method/base.yaml
    method = [] if cell.method == BASE else [f"{method_key}={grid.methods[cell.method].preset}"]
    if cell.method != BASE and grid.methods[cell.method].variant:  # its runs and results under its own name
        method.append(f"{method_key}.name={cell.method}")
    path = [f"model.path={grid.model_paths[cell.model]}"] if cell.model in grid.model_paths else []
    args = [f"experiment={grid.experiment}", f"model={cell.model}", *path, *method]
    args += [f"pruner={cell.pruner}", f"budget={budget_tag(cell.budget)}", f"seed={seed}"]
    return args + list(grid.model_overrides.get(cell.model, ()))


def _checkpoint_args(grid: Grid, cell: Cell, seed: int | None = None) -> list[str]:
    return [] if cell.method == BASE else [f"checkpoint={grid.checkpoint_dir(grid.train_run(cell), seed)}"]


def _seed_root_args(grid: Grid, key: str, root: str, seed: int | None) -> list[str]:
    # grid.seed keeps the entry point's default root (conf/train.yaml runs_root, conf/evaluate.yaml results_root)
    return [] if seed in (None, grid.seed) else [f"{key}={grid.seed_root(root, seed)}"]


ALLOCATED_GPUS = "SLURM_GPUS_ON_NODE"
"""The GPUs SLURM gave the job step on its node (set by srun/sbatch for a job that asked for GPUs, srun(1)
OUTPUT ENVIRONMENT VARIABLES); the jobstep plugin runs each rule's command in such a step with ``--gpus=<n>``."""


def launcher(gpus: int) -> list[str]:
    """Returns the interpreter arguments that start a job's processes: none for one GPU (or none), else
    ``torch.distributed.run`` with one process per GPU the job was given (``$SLURM_GPUS_ON_NODE`` inside a SLURM
    allocation, so the count is the allocation's; ``gpus``, the rule's request, elsewhere). A shell word: the
    rules run it through the shell, which expands it."""
    if gpus <= 1:
        return []
    return ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", f"${{{ALLOCATED_GPUS}:-{gpus}}}"]


def train_command(grid: Grid) -> list[str]:
    """Returns the command before ``train.py``'s overrides: with several GPUs ``torch.distributed.run`` starting
    one process per GPU, as for evaluation. Accelerate forms the process group from torchrun's environment (NCCL
    on GPUs, gloo on the CPU), so the rehearsal's CPU processes run this very command; ``accelerate launch``
    would start one process where it finds no GPU."""
    python, script = entry_point("train.py")
    return [python, *launcher(grid.resources["train"]["gpu"]), script]


def evaluate_command(grid: Grid) -> list[str]:
    """Returns the command before a greedy evaluation's overrides: ``evaluate.py``, or with several GPUs per
    evaluation job (``grid.resources.evaluate.gpu``) ``torch.distributed.run`` starting one process per GPU,
    each decoding its shard of every benchmark (``evaluate_args`` adds ``shard.from_env=torchrun``; rank 0
    merges the parts into the one-process result)."""
    python, script = entry_point("evaluate.py")
    return [python, *launcher(grid.resources["evaluate"]["gpu"]), script]


def train_args(grid: Grid, run: TrainRun, seed: int | None = None) -> list[str]:
    """Returns the ``train.py`` overrides of ``run`` trained with ``seed`` (None: ``grid.seed``).

    A seed other than ``grid.seed`` trains into ``runs/seed<s>/`` (``runs_root``), beside the grid seed's run.
    The model's ``train_overrides`` come last: what a model needs to train at all (sharding, a tower its
    family cannot train) holds for every method.
    """
    cell = Cell(run.model, run.method, run.pruner, run.budget, "")
    args = _point_args(grid, cell, "method", grid.seed if seed is None else seed)
    args += _seed_root_args(grid, "runs_root", "runs", seed) + data_args(grid, "train")
    args += grid.overrides("train") + list(grid.methods[run.method].overrides)
    return args + list(grid.model_train_overrides.get(run.model, ())) + grid.final_overrides("train")


def evaluate_args(grid: Grid, cell: Cell, mode: str = "greedy", seed: int | None = None) -> list[str]:
    """Returns the ``evaluate.py`` overrides of ``cell`` in ``mode`` (``greedy`` or ``passk``), evaluating the
    checkpoint trained with ``seed`` (None: ``grid.seed``).

    A seed other than ``grid.seed`` (greedy results of trained cells only) reads ``runs/seed<s>/`` and writes
    ``results/seed<s>/`` (``results_root``). The evaluation itself keeps ``seed=<grid.seed>``: pruner masks
    and sampling are those of the untrained rows it is compared with, so seeds differ by training alone. A
    cell with no benchmark is a per-leaf job (``grid.eval_jobs: leaf``): ``bench=[...]`` names the benchmarks
    its leaf needs (``Grid.job_benches``).
    """
    if seed not in (None, grid.seed) and (mode != "greedy" or cell.method == BASE):
        raise ValueError(f"{cell} in mode {mode}: only greedy results of a trained cell have training seeds")
    benches = ",".join(grid.job_benches(cell))
    args = [
        *_point_args(grid, cell, EVAL_METHOD_KEY, grid.seed),
        f"bench={cell.bench}" if cell.bench else f"bench=[{benches}]",
        *data_args(grid, mode, benches),
    ]
    args += _checkpoint_args(grid, cell, seed) + _seed_root_args(grid, "results_root", "results", seed)
    if mode == "passk":
        full = Path(grid.reference_leaf(cell.model, cell.bench)).parent
        args += ["mode=passk", f"passk.full_context_leaf={full}"]
    elif grid.resources["evaluate"]["gpu"] > 1:  # evaluate_command's torchrun: one shard per GPU
        args += ["shard.from_env=torchrun"]
    stage = "evaluate" if mode == "greedy" else mode
    return args + grid.overrides(stage) + grid.final_overrides(stage, benches.split(","))


def efficiency_args(grid: Grid, run: EfficiencyRun) -> list[str]:
    """Returns the ``evaluate.py mode=efficiency`` overrides of ``run`` (``budget`` names a folder)."""
    budgets = ",".join(budget_tag(b) for b in run.budgets)
    cell = run.cell
    args = [
        *_point_args(grid, cell, EVAL_METHOD_KEY, grid.seed),
        f"bench={run.bench}",
        *data_args(grid, "efficiency", run.bench),
    ]
    args += [
        *_checkpoint_args(grid, cell),
        "mode=efficiency",
        f"efficiency.bench={run.bench}",
        f"efficiency.budgets=[{budgets}]",
    ]
    return args + grid.overrides("efficiency") + grid.final_overrides("efficiency", [run.bench])


PREFLIGHT_KEYS = ("bench.", "model.")
"""Evaluation overrides the preflight takes too (a benchmark's path, a model setting): it checks what runs."""


def model_settings(overrides: Iterable[str]) -> list[str]:
    """Returns the ``model.<key>=<value>`` entries of ``overrides`` as ``<key>:<value>`` (Hydra's dict syntax),
    the value as written (``false``, ``'<answer>'``)."""
    return [o.removeprefix("model.").replace("=", ":", 1) for o in overrides if o.startswith("model.")]


def preflight_args(grid: Grid) -> list[str]:
    """Returns the ``preflight.py`` overrides checking every scheduled model, benchmark and training file of
    ``grid`` (with ``model_paths``, each model's own ``model.*`` overrides as ``model_settings``, and the
    evaluation's ``bench.*``/``model.*`` overrides), its report at ``Grid.preflight_output``."""
    models, benches = grid.names("model"), grid.names("bench")
    args = [f"models=[{','.join(models)}]", f"bench=[{','.join(benches)}]"]
    args += [f"train_files=[{','.join(grid.train_files())}]", f"out={grid.preflight_output()}"]
    paths = {m: p for m, p in grid.model_paths.items() if m in models}
    if paths:
        args.append("model_paths={" + ",".join(f"{m}:'{p}'" for m, p in sorted(paths.items())) + "}")
    settings = {m: model_settings(grid.model_overrides.get(m, ())) for m in models}
    if any(settings.values()):
        entries = [f"{m}:{{{','.join(own)}}}" for m, own in sorted(settings.items()) if own]
        args.append("model_settings={" + ",".join(entries) + "}")
    evaluation = grid.overrides("evaluate") + grid.final_overrides("evaluate")
    return args + [o for o in evaluation if o.startswith(PREFLIGHT_KEYS)]


def tables_args(grid: Grid, config_files: Iterable[str | Path] = ()) -> list[str]:
    """Returns the ``make_tables.py`` overrides: ``train_seeds=[...]`` when trained rows pool several seeds, and
    ``grid_files=[...]``, the ``config_files`` (Snakemake's ``--configfile``) that replace grid keys.

    With ``grid.train_seeds == [grid.seed]`` no ``train_seeds`` is passed (``make_tables.py``'s null: the grid's
    one seed), so a single-seed study's command and tables are what they were before the key existed.
    """
    seeds = [] if not grid.extra_seeds else [f"train_seeds=[{','.join(map(str, grid.train_seeds))}]"]
    replacing = [str(Path(f).resolve()) for f in config_files if (load_yaml(Path(f)) or {}).get("grid")]
    files = [f"grid_files=[{','.join(replacing)}]"] if replacing else []
    return [f"experiment={grid.experiment}", *seeds, *files, *grid.overrides("tables"), *grid.final_overrides("tables")]
