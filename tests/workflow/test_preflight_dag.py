"""The preflight as the DAG's first job: on a real-size preset (the user's checkpoints and benchmark files) every
train and evaluation job waits for its report, and per-model checkpoint folders reach every job; the tiny
studies (whose data job writes their inputs) have none, so their job counts are unchanged."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from user_files import write_user_files

from sparsectx import workflow as wf

ROOT = wf.REPO_DIR
GPU_RULES = ("train", "evaluate_base", "evaluate_trained", "passk", "efficiency")


def dry_run(workdir: Path, *args: str, experiment: str) -> str:
    """Returns the printed plan of ``snakemake -n -p all_tables <args>`` of ``experiment`` on a working directory
    holding only the user's files it declares (``write_user_files``)."""
    write_user_files(workdir, experiment)
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(ROOT / "Snakefile"),
        "--directory",
        str(workdir),
        "--workflow-profile",
        "none",
        "-n",
        "-p",
        "all_tables",
        "--config",
        f"experiment={experiment}",
        *args,
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout


def jobs(plan: str) -> list[tuple[str, str]]:
    """Returns (rule, job text) of every job of a dry run's plan, in the order Snakemake lists them."""
    parts = re.split(r"^rule (\w+):$", plan, flags=re.MULTILINE)
    return list(zip(parts[1::2], parts[2::2], strict=True))


@pytest.mark.parametrize("experiment", ["scopd_qwen2_5_vl_7b", "ltopd_qwen3_5_4b"])
def test_real_preset_runs_the_preflight_first(tmp_path: Path, experiment: str) -> None:
    plan = dry_run(tmp_path, experiment=experiment)
    listed = jobs(plan)
    report = f"results/{experiment}/preflight.json"
    # the plan first (sparsectx.plan: nothing queued when a job cannot fit), then the preflight, which waits for it
    assert [rule for rule, _ in listed[:2]] == ["plan", "preflight"]
    assert [rule for rule, _ in listed].count("preflight") == 1
    assert re.search(rf"input: [^\n]*results/{experiment}/plan\.md", listed[1][1])
    gpu_jobs = [text for rule, text in listed if rule in GPU_RULES]
    assert gpu_jobs and all(re.search(rf"input: [^\n]*{re.escape(report)}", text) for text in gpu_jobs)
    grid = wf.load_grid(experiment)
    command = listed[1][1]
    assert f"'models=[{','.join(grid.names('model'))}]'" in command
    assert f"'bench=[{','.join(grid.names('bench'))}]'" in command
    assert f"'train_files=[{','.join(grid.train_files())}]'" in command and f"out={report}" in command


def test_model_paths_reach_the_preflight_and_every_job_of_that_model(tmp_path: Path) -> None:
    paths = tmp_path / "paths.yaml"
    paths.write_text(yaml.safe_dump({"model_paths": {"qwen2_5_vl_7b": "/models/Qwen2.5-VL-7B-Instruct"}}))
    plan = dry_run(tmp_path, "--configfile", str(paths), experiment="scopd_qwen2_5_vl_7b")
    listed = jobs(plan)
    preflight = dict(listed)["preflight"]
    assert "qwen2_5_vl_7b:" in preflight and "/models/Qwen2.5-VL-7B-Instruct" in preflight
    for rule, text in listed:
        if rule in GPU_RULES:
            on_7b = "model=qwen2_5_vl_7b " in text
            assert ("model.path=/models/Qwen2.5-VL-7B-Instruct" in text) == on_7b, text


def test_tiny_study_has_no_preflight(tmp_path: Path) -> None:
    plan = dry_run(tmp_path, experiment="tiny")
    assert "preflight" not in plan
    assert wf.load_grid("tiny").preflight_inputs() == []


def test_each_gpu_job_asks_slurm_for_its_planned_time_limit(tmp_path: Path) -> None:
    # the runtime each job requests is the plan's limit of that job (sparsectx.plan), not the flat grid runtime
    from sparsectx.plan import planned_runtimes

    listed = jobs(dry_run(tmp_path, experiment="ltopd_qwen3_5_4b"))
    limits = planned_runtimes(wf.load_grid("ltopd_qwen3_5_4b"))
    checked = set()
    for rule, text in listed:
        if rule in GPU_RULES:
            output = re.search(r"output: ([^\s,]+)", text).group(1)
            assert f"runtime={limits[output]}," in text, (rule, output)
            checked.add(rule)
    assert checked == {"train", "evaluate_base", "evaluate_trained", "efficiency"}
    assert len({limits[o] for o in limits}) > 3  # the limits differ by job, not one flat value
