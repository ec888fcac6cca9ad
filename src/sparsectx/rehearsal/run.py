"""One rehearsal of a real preset: its working directory prepared, the pipeline run there, a summary written.

``rehearsal/<experiment>/`` gets a tiny random-weight checkpoint per scheduled model (``models/<name>-<digest>/``), a
miniature real-layout file per benchmark and the training file at the path the preset's train jobs read
(``data/``), and a Snakemake config naming them (``rehearsal.yaml``). The pipeline then runs every job of the
preset there (``snakemake --directory``), with ``LMUData`` pointing at that ``data/`` so no benchmark file of the
user's is ever read, and nothing from the network. ``rehearsal.json`` records the wall time, the jobs, the
tables and figures rendered and the declared refusals (the cells the grid footnotes).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from sparsectx.io import atomic_write_json, atomic_write_text, git_commit
from sparsectx.rehearsal.checkpoints import write_tiny_checkpoint
from sparsectx.rehearsal.data import write_benchmarks, write_training_file
from sparsectx.workflow import REPO_DIR, Grid, load_grid, load_rehearsal

REHEARSAL_ROOT = REPO_DIR / "rehearsal"
"""Where each preset's rehearsal works (``rehearsal/<experiment>/``); ignored by git."""
RENDERED = (".md", ".csv", ".tex", ".png", ".svg")
"""The file kinds make_tables writes: each one counts as a rendered table or figure."""


def workdir_of(experiment: str) -> Path:
    """Returns the rehearsal's working directory of ``experiment``."""
    return REHEARSAL_ROOT / experiment


def tiny_checkpoint(model: str, models_dir: Path, seed: int) -> Path:
    """Returns ``models_dir/<model>-<digest>/``, the tiny instance of ``model`` named by its files' digest.

    A checkpoint that the code now builds differently lands in a new folder: its jobs' ``model.path`` changes,
    so Snakemake reruns them, and no job keeps results of a stale instance.
    """
    staging = Path(tempfile.mkdtemp(prefix=f".{model}-", dir=models_dir))
    try:
        write_tiny_checkpoint(model, staging, seed)
        digest = hashlib.sha256()
        for path in sorted(p for p in staging.rglob("*") if p.is_file()):
            digest.update(path.relative_to(staging).as_posix().encode() + b"\0" + path.read_bytes())
        folder = models_dir / f"{model}-{digest.hexdigest()[:10]}"
        if not folder.is_dir():
            staging.rename(folder)
        return folder
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def prepare(grid: Grid, workdir: Path) -> dict[str, str]:
    """Returns model -> tiny checkpoint folder after writing the rehearsal's inputs into ``workdir``.

    Each scheduled model gets a tiny instance of its published class (``tiny_checkpoint``), each scheduled
    benchmark its miniature file(s) under ``data/``, and each training file the preset names its miniature
    counterpart at that path (files whose bytes are unchanged are left as they are).
    """
    seed = load_rehearsal().seed
    models_dir = workdir / "models"
    models_dir.mkdir(parents=True, exist_ok=True)
    paths = {model: str(tiny_checkpoint(model, models_dir, seed)) for model in grid.names("model")}
    write_benchmarks(grid.names("bench"), workdir / "data")
    for path in grid.train_files():
        write_training_file(workdir / path)
    return paths


def snakemake_config(grid: Grid, model_paths: dict[str, str]) -> dict[str, Any]:
    """Returns the Snakemake config of the rehearsal: the preset, ``rehearsal: true``, the tiny checkpoints."""
    return {"experiment": grid.experiment, "rehearsal": True, "model_paths": model_paths}


def pipeline_command(workdir: Path, config_file: Path, cores: int, targets: list[str]) -> list[str]:
    """Returns the pipeline call (``python -m sparsectx.pipeline``) running ``targets`` in ``workdir``."""
    return [
        sys.executable,
        "-m",
        "sparsectx.pipeline",
        "--snakefile",
        str(REPO_DIR / "Snakefile"),
        "--profile",
        str(REPO_DIR / "workflow" / "profiles" / "local"),
        "--directory",
        str(workdir),
        "--cores",
        str(cores),
        "--keep-going",
        *targets,
        "--configfile",
        str(config_file),
    ]


def rehearsal_env(workdir: Path) -> dict[str, str]:
    """Returns the jobs' environment: benchmark files from ``workdir/data`` only, nothing from the network."""
    env = dict(os.environ)
    env.update(LMUData=str(workdir / "data"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled")
    return env


def jobs_done(workdir: Path) -> tuple[int, int] | None:
    """Returns (done, total) steps of the latest Snakemake log in ``workdir``; None if it printed none."""
    logs = sorted((workdir / ".snakemake" / "log").glob("*.snakemake.log"))
    if not logs:
        return None
    found = re.findall(r"^(\d+) of (\d+) steps", logs[-1].read_text(), flags=re.MULTILINE)
    return (int(found[-1][0]), int(found[-1][1])) if found else None


def rendered(workdir: Path, grid: Grid) -> dict[str, int]:
    """Returns file kind -> count of the tables and figures make_tables wrote in ``workdir``."""
    tables = workdir / grid.tables_dir()
    files = [p for p in tables.rglob("*") if p.is_file() and p.suffix in RENDERED] if tables.is_dir() else []
    return dict(sorted(Counter(p.suffix for p in files).items()))


def refusals(grid: Grid) -> list[dict[str, Any]]:
    """Returns the declared refusals (cells the grid cannot run, footnoted in the tables), one per reason."""
    counts = Counter((cell.block, cell.reason) for cell in grid.missing_cells())
    return [{"block": block, "reason": reason, "cells": n} for (block, reason), n in sorted(counts.items())]


def rehearse(
    experiment: str,
    cores: int = 2,
    targets: list[str] | None = None,
    workdir: Path | None = None,
    grid_file: Path | None = None,
) -> int:
    """Returns the pipeline's exit status after rehearsing ``experiment`` in ``workdir`` (default
    ``rehearsal/<experiment>/``).

    ``grid_file`` is a YAML with a ``grid:`` mapping whose keys replace the preset's (what Snakemake's
    ``--configfile`` does): a reduced rehearsal, e.g. the test suite's one job of each rule and block shape.
    """
    workdir = (workdir_of(experiment) if workdir is None else workdir).resolve()
    if workdir == REPO_DIR:
        raise ValueError(f"workdir={workdir} is the checkout: a rehearsal never writes into its results/")
    workdir.mkdir(parents=True, exist_ok=True)
    replacements = {} if grid_file is None else (yaml.safe_load(grid_file.read_text()) or {}).get("grid") or {}
    grid = load_grid(experiment, replacements)
    started = time.monotonic()
    config_file = workdir / "rehearsal.yaml"
    config = {**snakemake_config(grid, prepare(grid, workdir)), **({"grid": replacements} if replacements else {})}
    atomic_write_text(config_file, yaml.safe_dump(config))
    prepared = time.monotonic() - started
    command = pipeline_command(workdir, config_file, cores, targets or ["all_tables"])
    print("sparsectx.rehearsal:", " ".join(command), flush=True)
    status = subprocess.run(command, cwd=REPO_DIR, env=rehearsal_env(workdir)).returncode
    done = jobs_done(workdir)
    summary = {
        "experiment": experiment,
        "returncode": status,
        "wall_s": round(time.monotonic() - started, 1),
        "prepare_s": round(prepared, 1),
        "jobs": None if done is None else {"done": done[0], "total": done[1]},
        "rendered": rendered(workdir, grid),
        "refusals": refusals(grid),
        "cores": cores,
        "grid_file": None if grid_file is None else str(grid_file),
        "git": git_commit(REPO_DIR),
    }
    atomic_write_json(workdir / "rehearsal.json", summary)
    print(yaml.safe_dump({k: v for k, v in summary.items() if k != "git"}, sort_keys=False), flush=True)
    return status
