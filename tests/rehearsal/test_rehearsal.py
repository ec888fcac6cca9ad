"""The rehearsal: the real presets' jobs, same DAG and commands, on tiny instances and miniature real-layout files.

Unit checks of the scaling (conf/rehearsal.yaml last on every command, GPUs as at most two CPU processes, each
benchmark's answer cap; refused in the checkout itself), then the suite's subset of each real preset
(tests/rehearsal/subsets.py: at least one job of each rule and block shape) run end to end through
``python -m sparsectx.rehearsal`` in a temporary folder: rc 0, every job done, every block's table and every
report entry rendered, the unsupported cells footnoted, and nothing written into the checkout's results/.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sparsectx import workflow as wf

from .subsets import SUBSETS

ROOT = wf.REPO_DIR


def rehearsal_grid(experiment: str, replacements: dict | None = None) -> wf.Grid:
    """Returns the grid a rehearsal of ``experiment`` schedules (the Snakefile's, with ``rehearsal: true``)."""
    config = wf.resolve_config({"experiment": experiment, "grid": replacements or {}, "hydra_overrides": {}})
    return wf.Grid(experiment, config["grid"], rehearsal=wf.load_rehearsal())


def test_a_rehearsal_is_refused_in_the_checkout(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="real results/"):
        wf.rehearsal_of({"rehearsal": True}, ROOT)
    assert wf.rehearsal_of({"rehearsal": True}, tmp_path) == wf.load_rehearsal()
    assert wf.rehearsal_of({}, ROOT) is None


def test_the_rehearsal_scaling_comes_last_on_every_command() -> None:
    rehearsal = wf.load_rehearsal()
    grid = rehearsal_grid("scopd_qwen2_5_vl_7b")
    (grpo,) = [r for r in grid.train_runs if r.method == "grpo"]
    train = wf.train_args(grid, grpo)
    assert "steps=2500" in train and train[-len(rehearsal.overrides["train"]) :] == list(rehearsal.overrides["train"])
    launch = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "${SLURM_GPUS_ON_NODE:-2}"]
    assert wf.train_command(grid)[1:6] == launch  # the allocation's GPUs under SLURM, else the request
    assert grid.resources["train"]["gpu"] == rehearsal.processes and grid.resources["evaluate"]["gpu"] == 1
    cell = next(c for c in grid.cells("table") if c.bench == "mathvista")
    evaluate = wf.evaluate_args(grid, cell)
    assert evaluate[-1] == f"bench.mathvista.max_new_tokens={rehearsal.max_new_tokens}"
    real = wf.load_grid("scopd_qwen2_5_vl_7b")
    assert wf.train_args(real, grpo)[-1] != train[-1] and real.resources["train"]["gpu"] == 4


def snakemake_rules(workdir: Path) -> set[str]:
    """Returns the rules whose jobs the rehearsal's Snakemake log shows finished; the numbered per-leaf evaluation
    rules (``evaluate_base_2``: leaves that need other benchmarks, ``sparsectx.workflow.eval_jobs``) by their kind."""
    (log,) = sorted((workdir / ".snakemake" / "log").glob("*.snakemake.log"))[-1:]
    finished = re.findall(r"^Finished jobid: \d+ \(Rule: (\w+)\)", log.read_text(), flags=re.MULTILINE)
    return {re.sub(r"^(evaluate_\w+?)_\d+$", r"\1", rule) for rule in finished}


EVERY_STUDY = {"plan", "preflight", "evaluate_base", "train", "evaluate_trained", "make_tables"}
EXPECTED_RULES = {"scopd_qwen2_5_vl_7b": EVERY_STUDY | {"passk"}, "ltopd_qwen3_5_4b": EVERY_STUDY | {"efficiency"}}


@pytest.mark.slow
@pytest.mark.parametrize(  # LT-OPD's subset (133 s) in make test-long; SCOPD's in CI
    "experiment",
    [pytest.param(e, marks=[pytest.mark.long] if e == "ltopd_qwen3_5_4b" else []) for e in sorted(SUBSETS)],
)
def test_a_subset_of_each_real_preset_rehearses_clean(tmp_path: Path, experiment: str) -> None:
    grid_file = tmp_path / "subset.yaml"
    grid_file.write_text(yaml.safe_dump({"grid": SUBSETS[experiment]}))
    workdir = tmp_path / "rehearsal"
    real_results = ROOT / "results" / experiment
    before = sorted(real_results.rglob("*")) if real_results.exists() else []
    command = [
        sys.executable,
        "-m",
        "sparsectx.rehearsal",
        f"experiment={experiment}",
        "cores=2",
        f"workdir={workdir}",
        f"grid_file={grid_file}",
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    summary = json.loads((workdir / "rehearsal.json").read_text())
    assert summary["jobs"]["done"] == summary["jobs"]["total"] > 0
    assert snakemake_rules(workdir) >= EXPECTED_RULES[experiment]
    grid = rehearsal_grid(experiment, SUBSETS[experiment])
    tables = workdir / grid.tables_dir()
    for block in grid.blocks:
        assert (tables / f"{block.name}.md").is_file() or (tables / f"{block.kind}.md").is_file(), block.name
    for name in grid.report:
        assert any(tables.glob(f"{name}*")), name
    for missing in grid.missing_cells():
        assert missing.reason.split(": ", 1)[1][:30] in (tables / f"{missing.block}.md").read_text()
    assert (workdir / grid.plan_output()).is_file() and (workdir / grid.preflight_output()).is_file()
    after = sorted(real_results.rglob("*")) if real_results.exists() else []
    assert after == before
