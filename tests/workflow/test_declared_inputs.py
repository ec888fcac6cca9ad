"""The user's files of a real preset as declared Snakemake inputs: ``snakemake -n`` names a missing benchmark or
training file with the setting that points at it before anything is queued; with the files present the dry run
lists the jobs, each declaring the file(s) it reads; a changed benchmark file reruns the jobs that read it.

Snakemake runs as a subprocess on an empty working directory (``--directory``) with a reduced SCOPD grid (a
``--configfile`` replacing grid keys: one model, MME and the two-file CV-Bench, one trained method, one Pass@K
cell) and ``$LMUData`` pointed at a folder of the test's own, so files of the machine's ``~/LMUData`` never count.
The files are the rehearsal's miniature ones, in VLMEvalKit's layout (``sparsectx.rehearsal.data``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sparsectx import workflow as wf
from sparsectx.rehearsal.data import write_benchmarks, write_training_file
from sparsectx.workflow import inputs as declared

pytestmark = pytest.mark.slow

ROOT = wf.REPO_DIR
EXPERIMENT = "scopd_qwen2_5_vl_7b"
TRAIN_FILE = "data/llava_cot_10k.tsv"
"""The preset's ``train_data.path`` (grid.overrides.train), relative to the working directory."""
ROW = {"methods": ["base"], "pruners": ["visionzip"], "budgets": [0.1]}
MODEL = {"models": ["qwen2_5_vl_7b"]}
REDUCED = {
    "experiment": EXPERIMENT,
    "grid": {
        "models": {"qwen2_5_vl_7b": {}},
        "pruners": {"visionzip": {}},
        "benchmarks": {"mme": {}, "cvbench": {}},
        "methods": {"scopd_plus": {"pruner": "visionzip", "budgets": [0.1]}},
        "tables": {
            "main": {**MODEL, "benchmarks": ["mme", "cvbench"], "rows": [{**ROW, "methods": ["base", "scopd_plus"]}]}
        },
        "passk": {**MODEL, "benchmarks": ["mme"], "rows": [ROW]},
        "report": {},
    },
}
"""A grid of each stage that reads a user's file (greedy evaluation, Pass@K, training), of both file shapes."""
CVBENCH = ("CV-Bench-2D.tsv", "CV-Bench-3D.tsv")


def dry_run(workdir: Path, lmu_data: Path, *targets: str) -> subprocess.CompletedProcess[str]:
    """Returns ``snakemake -n -p`` of the reduced grid in ``workdir`` with ``$LMUData`` at ``lmu_data``."""
    config = workdir.parent / f"{workdir.name}.yaml"
    config.write_text(yaml.safe_dump(REDUCED))
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir)]
    cmd += ["--workflow-profile", "none", "--configfile", str(config), "-n", "-p", *(targets or ["all_tables"])]
    env = {**os.environ, "LMUData": str(lmu_data)}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def write_files(workdir: Path, lmu_data: Path, benches: list[str], train: bool = True) -> None:
    """Writes the miniature files of ``benches`` into ``lmu_data`` and (``train``) the training file in
    ``workdir``, each in its real layout (the rehearsal's writers)."""
    write_benchmarks(benches, lmu_data)
    if train:
        write_training_file(workdir / TRAIN_FILE)


def jobs(plan: str) -> list[tuple[str, str]]:
    """Returns (rule, job text) of every job of a dry run's plan, in the order Snakemake lists them."""
    parts = re.split(r"^rule (\w+):$", plan, flags=re.MULTILINE)
    return list(zip(parts[1::2], parts[2::2], strict=True))


def inputs(text: str) -> list[str]:
    """Returns the input files of one job of a dry run's plan (its ``input:`` line)."""
    match = re.search(r"^\s+input: (.+)$", text, flags=re.MULTILINE)
    return match.group(1).split(", ") if match else []


def test_a_dry_run_names_each_missing_file_and_the_setting_that_points_at_it(tmp_path: Path) -> None:
    lmu_data = tmp_path / "LMUData"
    write_files(tmp_path / "work", lmu_data, ["mme"], train=False)  # CV-Bench and the training file missing
    run = dry_run(tmp_path / "work", lmu_data)
    output = run.stdout + run.stderr
    assert run.returncode != 0, output
    assert "2 input file(s) missing, nothing was queued" in output, output
    assert f"no {' + '.join(CVBENCH)} at {lmu_data / CVBENCH[0]}" in output, output
    assert "set bench.cvbench.path=<file or folder> in the evaluate overrides" in output
    assert f"training file {TRAIN_FILE} (train_data.path): not found" in output
    assert "`python src/build_data.py data/sources=llava_cot`" in output and "set train_data.path=<file>" in output
    assert "$LMUData" in output and f"conf/experiment/{EXPERIMENT}.yaml" in output
    assert "MME.tsv at" not in output  # found in $LMUData: not reported
    assert "Job stats" not in output  # no job listed, none queued


def test_with_the_files_present_each_job_declares_the_files_it_reads(tmp_path: Path) -> None:
    lmu_data, workdir = tmp_path / "LMUData", tmp_path / "work"
    write_files(workdir, lmu_data, ["mme", "cvbench"])
    run = dry_run(workdir, lmu_data)
    assert run.returncode == 0, run.stdout + run.stderr
    listed = jobs(run.stdout)
    mme, cvbench = str(lmu_data / "MME.tsv"), [str(lmu_data / name) for name in CVBENCH]
    by_rule: dict[str, list[list[str]]] = {}
    for rule, text in listed:  # evaluate_base_2, ...: the per-leaf jobs of leaves that need other benchmarks
        by_rule.setdefault(re.sub(r"_\d+$", "", rule), []).append(inputs(text))
    (preflight,) = by_rule["preflight"]
    assert {mme, *cvbench, TRAIN_FILE} <= set(preflight)
    for rule in ("evaluate_base", "evaluate_trained"):  # one job per benchmark, or per leaf reading both
        assert all({mme, *cvbench} & set(files) for files in by_rule[rule]), rule
        assert {mme, *cvbench} <= {path for files in by_rule[rule] for path in files}, rule
    assert all(TRAIN_FILE in files for files in by_rule["train"])
    assert all(mme in files and not set(cvbench) & set(files) for files in by_rule["passk"])


def test_a_changed_benchmark_file_reruns_the_jobs_that_read_it(tmp_path: Path) -> None:
    lmu_data, workdir = tmp_path / "LMUData", tmp_path / "work"
    write_files(workdir, lmu_data, ["mme", "cvbench"])
    grid = wf.load_grid(EXPERIMENT, REDUCED["grid"])
    cell = wf.Cell("qwen2_5_vl_7b", wf.BASE, "visionzip", 1.0, "mme")
    job = cell if grid.eval_jobs == "benchmark" else dataclasses.replace(cell, bench="")  # what one job writes
    outputs = [grid.leaf(dataclasses.replace(cell, bench=bench)) for bench in grid.job_benches(job)]
    done = [grid.plan_output(), grid.preflight_output(), *outputs]
    for path in done:
        (workdir / path).parent.mkdir(parents=True, exist_ok=True)
        (workdir / path).write_text("{}")
    inputs_time = (lmu_data / "MME.tsv").stat().st_mtime
    for path in done:
        os.utime(workdir / path, (inputs_time + 10, inputs_time + 10))
    fresh = dry_run(workdir, lmu_data, *outputs)
    assert "Nothing to be done" in fresh.stdout + fresh.stderr, fresh.stdout + fresh.stderr
    os.utime(lmu_data / "MME.tsv", (inputs_time + 20, inputs_time + 20))  # a re-downloaded MME.tsv
    run = dry_run(workdir, lmu_data, *outputs)
    assert run.returncode == 0, run.stdout + run.stderr
    rules = {rule: text for rule, text in jobs(run.stdout)}
    evaluate = wf.eval_rule_name(grid, job)
    assert set(rules) == {"preflight", evaluate}, run.stdout
    assert re.search(r"reason: Updated input files: [^\n]*MME\.tsv", rules["preflight"]), rules["preflight"]
    assert str(lmu_data / "MME.tsv") in inputs(rules[evaluate])  # Snakemake names one reason: the preflight


def test_a_grid_whose_data_job_writes_the_files_declares_that_jobs_outputs() -> None:
    grid = wf.load_grid("tiny")
    data = grid.data_files()
    cell = grid.cells("table")[0]
    run = grid.train_runs[0]
    assert declared.greedy_inputs(grid, data, cell) == [data[cell.bench]]
    assert declared.passk_inputs(grid, data, cell) == [data[cell.bench]]
    assert declared.train_inputs(grid, data, run) == [data["train"]]


def test_a_finished_study_keeps_its_results_when_a_benchmark_file_is_gone(tmp_path: Path) -> None:
    # Only the preflight's input function raises: one in an evaluation job's would stop the DAG past its existing
    # result (snakemake.dag.DAG.collect_potential_dependencies), so a finished study could not render its tables.
    lmu_data, workdir = tmp_path / "LMUData", tmp_path / "work"
    write_files(workdir, lmu_data, ["cvbench"])  # MME.tsv gone after every job finished
    grid = wf.load_grid(EXPERIMENT, REDUCED["grid"])
    done = [leaf for stage in wf.TARGET_STAGES for leaf in grid.targets(stage)]
    done += [grid.plan_output(), grid.preflight_output(), f"{grid.tables_dir()}/main.md"]
    later = (workdir / TRAIN_FILE).stat().st_mtime + 10
    for path in done:
        (workdir / path).parent.mkdir(parents=True, exist_ok=True)
        (workdir / path).write_text("{}")
        os.utime(workdir / path, (later, later))
    os.utime(workdir / grid.tables_dir(), (later + 1, later + 1))
    run = dry_run(workdir, lmu_data)
    assert "Nothing to be done" in run.stdout + run.stderr, run.stdout + run.stderr
