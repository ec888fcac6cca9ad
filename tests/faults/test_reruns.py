"""Snakemake reruns of every rule of a small study (issue 39): ``--forcerun`` and a changed rule's code.

Before it reruns a job, Snakemake deletes the job's declared outputs (the train rule's is the checkpoint's
``config.json``, an evaluation's its result JSON, the tables rule's whole folder). Each rerun here must end
with every output present and valid, and the tables equal to the first run's: the training job rewrites its
checkpoint from its final resume state, an evaluation rescores its finished predictions. Efficiency timings are
measured afresh by design, so its tables are not compared.

One small study (one benchmark, one pruner at one budget, one 2-step SFT run, Pass@K and efficiency on one
item) is run to ``all_tables``, then rerun whole twice: with ``--forcerun`` of every rule, and with every job's
recorded code changed (what editing a rule's shell command does) under ``--rerun-triggers code``.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sparsectx import workflow as wf
from sparsectx.checkpoints import checkpoint_info, verify_checkpoint

pytestmark = [pytest.mark.faults, pytest.mark.slow]

ROOT = wf.REPO_DIR
BENCH = "syn_count"
ROW = {"methods": ["base"], "pruners": ["visionzip"], "budgets": [0.1]}
BLOCK = {"models": ["tiny"], "benchmarks": [BENCH]}
SMALL = {
    "experiment": "tiny",
    "grid": {
        "pruners": {"visionzip": {}},
        "benchmarks": {BENCH: {}},
        "methods": {"sft": {"pruner": "visionzip", "budgets": [0.1]}},
        "tables": {"main": {**BLOCK, "rows": [{**ROW, "methods": ["base", "sft"]}]}},
        "passk": {**BLOCK, "rows": [ROW]},
        "efficiency": {**BLOCK, "rows": [ROW]},
    },
    "hydra_overrides": {
        "build_data": [
            *(f"data.benches.{b}.size=6" for b in wf.load_yaml(wf.CONF_DIR / "data/tiny.yaml")["benches"]),
            f"data.benches.{BENCH}.size=12",  # enough items for the tables' bootstrap intervals
            "data.train.size=8",
        ],
        "train": [
            "steps=2",
            "save_every=1",
            "method.effective_batch_size=2",
            "micro_batch_size=1",
            "max_new_tokens=8",
            "logger=none",
        ],
        "evaluate": [f"bench.{BENCH}.max_new_tokens=16"],
        "passk": [
            "passk.n=2",
            "passk.hit_m=[1,2]",
            "passk.max_items=1",
            "passk.max_new_tokens=8",
            "passk.sample_batch=2",
        ],
        "efficiency": [
            "efficiency.num_items=1",
            "efficiency.repetitions=1",
            "efficiency.warmup=0",
            "efficiency.decode_tokens=2",
        ],
    },
}
RULES = ("build_data", "evaluate_base", "train", "evaluate_trained", "passk", "efficiency", "make_tables")
"""Every rule the study runs (the plan and the preflight belong to studies on the user's inputs)."""


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Returns the finished Snakemake run of the small study in ``workdir`` (output captured, not checked)."""
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
        "--cores",
        "2",
        *args,
        "--configfile",
        str(workdir / "small.yaml"),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900)


def check(done: subprocess.CompletedProcess[str], workdir: Path) -> None:
    """Fails with Snakemake's output and every job's log unless the run succeeded."""
    logs = "\n".join(f"--- {p}\n{p.read_text()[-2000:]}" for p in sorted((workdir / "logs").rglob("*.log")))
    assert done.returncode == 0, done.stderr[-4000:] + logs


def jobs_run(done: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """Returns rule -> jobs of a finished run (Snakemake's job stats)."""
    table = (done.stdout + done.stderr).split("Job stats:")[1].split("total")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.MULTILINE)}


def outputs(workdir: Path) -> dict[str, object]:
    """Returns every output of the study, each checked valid: result and Pass@K scores, the efficiency file's
    budgets, the checkpoint (every file against its digest) and the tables (efficiency's timings left out)."""
    grid = wf.load_grid("tiny", SMALL["grid"])
    found: dict[str, object] = {}
    for stage in wf.TARGET_STAGES:
        for target in grid.targets(stage):
            path = workdir / target
            assert path.is_file(), target
            if stage == "train":
                assert verify_checkpoint(path.parent), target  # raises naming a missing or changed file
                found[target] = checkpoint_info(path.parent)
                continue
            payload = json.loads(path.read_text())
            assert payload["provenance"]["config_hash"], target
            found[target] = payload.get("score", payload.get("sparse", len(payload.get("budgets", []))))
    tables = workdir / grid.tables_dir()
    compared = [p for p in sorted(tables.rglob("*")) if p.suffix in (".csv", ".md") and "efficiency" not in p.name]
    assert any(p.suffix == ".csv" for p in compared), sorted(tables.iterdir())
    found.update({str(p.relative_to(workdir)): p.read_text() for p in compared})
    return found


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """Returns the small study's working directory after its first run, and its outputs."""
    workdir = tmp_path_factory.mktemp("reruns")
    (workdir / "small.yaml").write_text(yaml.safe_dump(SMALL))
    done = snakemake(workdir, "all_tables")
    check(done, workdir)
    return workdir, outputs(workdir)


@pytest.mark.long  # 89 s with its study: make test-long (test_dag_run's reruns of a deleted leaf stay in CI)
def test_forcerun_of_every_rule_ends_with_every_output_valid_and_the_same_tables(study) -> None:  # noqa: ANN001
    workdir, first = study
    done = snakemake(workdir, "all_tables", "--forcerun", *RULES)
    check(done, workdir)
    assert set(RULES) <= set(jobs_run(done)), jobs_run(done)
    assert outputs(workdir) == first


@pytest.mark.long  # 73 s: make test-long (the forced rerun of every rule stays in CI)
def test_a_changed_rule_code_reruns_every_job_to_valid_outputs_and_the_same_tables(study) -> None:  # noqa: ANN001
    workdir, first = study
    for record in (workdir / ".snakemake" / "metadata").iterdir():  # as if every rule's command was edited
        payload = json.loads(record.read_text())
        if payload.get("code") is not None:
            payload["code"] = "changed: " + payload["code"]
            record.write_text(json.dumps(payload))
    changed = {base64.urlsafe_b64decode(r.name).decode() for r in (workdir / ".snakemake" / "metadata").iterdir()}
    assert any(path.endswith("/checkpoint/config.json") for path in changed)
    done = snakemake(workdir, "all_tables", "--rerun-triggers", "code")
    check(done, workdir)
    assert set(RULES) <= set(jobs_run(done)), jobs_run(done)
    assert outputs(workdir) == first
