"""The Snakefile as users run it: lint, dry runs of every experiment, profile lookup, wildcard constraints.

Snakemake runs as a subprocess from the repo root (where `--profile slurm` must resolve) on an empty
working directory (`--directory`), so results of an earlier `make demo` never hide a job;
`--workflow-profile none` keeps any stray default profile out. A dry run needs no model or entry point; a real
preset's benchmark and training files are written as miniatures first (``user_files``), as its DAG declares them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from user_files import write_user_files

from sparsectx import workflow as wf

ROOT = wf.REPO_DIR
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
Snakemake = Callable[..., subprocess.CompletedProcess[str]]
KEPT_LINT = "Specify a conda environment or container for each rule."
"""The one lint kept on purpose: every rule runs in the project's venv (workflow/README.md, "Lint")."""


@pytest.fixture
def snakemake(tmp_path: Path) -> Snakemake:
    """Returns a function running `snakemake <args>` from the repo root on an empty working directory."""

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        cmd = [*SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path), *args]
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)

    return run


def job_counts(output: str) -> dict[str, int]:
    """Returns rule -> job count from a dry run's "Job stats" table."""
    table = output.split("Job stats:")[1].split("total")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.MULTILINE)}


def job_outputs(output: str, prefix: str) -> list[list[str]]:
    """Returns the declared outputs of each job of a dry run whose rule name starts with ``prefix``."""
    jobs = re.findall(r"^(?:local)?rule (\w+):((?:\n    .*)*)", output, re.MULTILINE)
    found = []
    for rule, body in jobs:
        if rule.startswith(prefix):
            (outputs,) = re.findall(r"^\s+output: (.+)$", body, re.MULTILINE)
            found.append(outputs.split(", "))
    return found


def test_lint_finds_nothing_but_the_missing_conda_envs(snakemake: Snakemake) -> None:
    run = snakemake("--lint", "--workflow-profile", "none")
    titles = re.findall(r"^\s+\* (.+?):?$", run.stdout + run.stderr, re.MULTILINE)
    assert titles, run.stdout + run.stderr
    assert set(titles) == {KEPT_LINT}, titles


@pytest.mark.parametrize("experiment", ["tiny", "scopd_qwen2_5_vl_7b", "ltopd_qwen3_5_4b"])
def test_dry_run_schedules_every_supported_leaf(snakemake: Snakemake, experiment: str, tmp_path: Path) -> None:
    write_user_files(tmp_path, experiment)  # a real preset's DAG declares the user's files (sparsectx.workflow.inputs)
    run = snakemake("-n", "--workflow-profile", "none", "all_tables", "--config", f"experiment={experiment}")
    assert run.returncode == 0, run.stderr + run.stdout
    counts = job_counts(run.stdout)
    grid = wf.load_grid(experiment)
    # greedy jobs: every result the tables and Pass@K cohorts read, each written once; per-leaf jobs one leaf each
    evaluations = job_outputs(run.stdout, "evaluate")
    written = [file for outputs in evaluations for file in outputs]
    references = {grid.reference_leaf(c.model, c.bench) for c in grid.cells("passk")}
    assert sorted(written) == sorted(set(grid.leaves("table")) | references)
    assert all(len({Path(file).parent for file in outputs}) == 1 for outputs in evaluations)
    leaves = {Path(file).parent for file in written}
    assert len(evaluations) == (len(leaves) if grid.eval_jobs == "leaf" else len(written))
    assert counts.get("train", 0) == len(grid.train_runs)
    assert counts.get("passk", 0) == len(grid.leaves("passk"))
    assert counts.get("efficiency", 0) == len(grid.efficiency_runs)
    assert counts["make_tables"] == counts["all_tables"] == 1


def test_all_tables_is_the_default_target(snakemake: Snakemake) -> None:
    run = snakemake("-n", "--workflow-profile", "none")
    assert run.returncode == 0, run.stderr
    assert job_counts(run.stdout)["all_tables"] == 1


def test_profile_slurm_resolves_from_the_repo_root(snakemake: Snakemake, tmp_path: Path) -> None:
    # no cluster answers here (a local test cluster may run beside this test): the profile checks nothing
    unreachable = tmp_path / "bin"
    unreachable.mkdir()
    for command in ("scontrol", "sinfo", "sacctmgr"):
        (unreachable / command).write_text("#!/bin/sh\nexit 1\n")
        (unreachable / command).chmod(0o755)
    env = {**os.environ, "PATH": f"{unreachable}:{os.environ['PATH']}"}
    write_user_files(tmp_path, "scopd_qwen2_5_vl_7b")
    run = snakemake("--profile", "slurm", "-n", "all_tables", "--config", "experiment=scopd_qwen2_5_vl_7b", env=env)
    assert run.returncode == 0, run.stderr + run.stdout
    assert "Using profile slurm" in run.stderr + run.stdout
    assert re.search(r"resources: .*slurm_partition=\S+.*gpu=4", run.stdout)  # train jobs ask for 4 GPUs


def test_local_profile_dry_run(snakemake: Snakemake) -> None:
    run = snakemake("--profile", "workflow/profiles/local", "-n", "all_tables")
    assert run.returncode == 0, run.stderr + run.stdout


def test_a_misspelt_leaf_matches_no_rule(snakemake: Snakemake) -> None:
    run = snakemake("-n", "--workflow-profile", "none", "results/tiny/tiny/base/visonzip/0.1/syn_count.json")
    assert run.returncode != 0
    output = run.stderr + run.stdout
    assert "MissingRuleException" in output or "No rule to produce" in output


def test_an_unsupported_cell_is_not_scheduled(snakemake: Snakemake) -> None:
    # LT-OPD's LLaVA-Mini rows are declared unsupported (no rule may produce them); the tiny grid has none.
    leaf = "results/ltopd_qwen3_5_4b/qwen3_5_4b/llava_mini/cdpruner/0.05/mme.json"
    run = snakemake("-n", "--workflow-profile", "none", leaf, "--config", "experiment=ltopd_qwen3_5_4b")
    assert run.returncode != 0
    output = run.stderr + run.stdout
    assert "MissingRuleException" in output or "No rule to produce" in output


def test_shell_commands_are_the_cli_with_overrides(snakemake: Snakemake) -> None:
    leaf = "results/tiny/tiny/scopd/random/0.1/syn_count.json"
    run = snakemake("-n", "-p", "--workflow-profile", "none", leaf)
    assert run.returncode == 0, run.stderr
    assert re.search(
        r"src/evaluate\.py experiment=tiny model=tiny method=scopd pruner=random budget=0\.1 seed=0 "
        r"bench=syn_count bench\.syn_count\.path=data/tiny-\w+/syn_count\.tsv "
        r"checkpoint=runs/tiny/tiny/scopd/visionzip/0\.1/checkpoint",
        run.stdout,
    )
    assert "processor.write=false" in run.stdout  # build_data never rewrites the shipped processor


def test_a_bad_grid_fails_while_parsing(snakemake: Snakemake, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("grid:\n  seed: -1\n")
    run = snakemake("-n", "--workflow-profile", "none", "--configfile", str(bad))
    assert run.returncode != 0
    assert "seed" in run.stderr + run.stdout


@pytest.mark.parametrize("experiment", ["tiny_scopd", "tiny_ltopd"])
def test_gpu_profile_schedules_one_evaluation_job_per_leaf(snakemake: Snakemake, experiment: str) -> None:
    run = snakemake(
        "--profile", "workflow/profiles/gpu", "-n", "-p", "all_tables", "--config", f"experiment={experiment}"
    )
    assert run.returncode == 0, run.stderr + run.stdout
    grid = wf.load_grid(experiment)
    assert grid.eval_jobs == "leaf" and len(grid.train_seeds) == 3
    leaves = {str(Path(leaf).parent) for leaf in grid.targets("sweep") + grid.targets("full_context")}
    trained = {str(Path(leaf).parent) for leaf in grid.targets("trained")}
    counts = job_counts(run.stdout)
    assert counts["evaluate_base"] == len(leaves)
    assert counts["evaluate_trained"] + counts["evaluate_trained_seed"] == len(trained)
    assert counts["train"] + counts["train_seed"] == len(grid.train_runs) * 3
    # the profile's cuda.yaml reaches every job: the model on the GPU, uncompiled
    assert "model.device=cuda engine.compile=off model.compile_blocks=off" in run.stdout
    suite = r"bench=\[syn_count,syn_detail,syn_mcq,syn_ocr,syn_pope,syn_spatial\]"
    assert re.search(r"src/evaluate\.py .*" + suite, run.stdout)
