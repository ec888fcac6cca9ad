"""Two facts the plan gives the cluster: a training job's early SIGTERM (``--signal=TERM@<lead>``, sbatch(1)) sized
to finish its step and write its resume state, and a per-leaf evaluation job planned over exactly the benchmarks it
writes (``grid.eval_jobs: leaf``: those its leaf's cells need, with one start-up)."""

from __future__ import annotations

import copy
import math

from plan.test_refusals import small_grid
from sparsectx.plan.dag import planned_resources
from sparsectx.plan.jobs import plan_jobs
from sparsectx.plan.limits import planned_runtimes, planned_stop_leads
from sparsectx.plan.memory import resume_state_gb
from sparsectx.plan.settings import load_plan_config
from sparsectx.workflow import flat_resources, load_grid

SCOPD = "scopd_qwen2_5_vl_7b"


def train_job(replacements: dict, *overrides: str):
    """Returns the one training job of a SCOPD grid with ``replacements`` under conf/plan.yaml ``overrides``."""
    (job,) = [
        j for j in plan_jobs(load_grid(SCOPD, replacements), load_plan_config(list(overrides))) if j.rule == "train"
    ]
    return job


def test_the_lead_covers_one_planned_step_and_the_nodes_state_write() -> None:
    replacements = small_grid(["micro_batch_size=1", "steps=313"])
    job = train_job(replacements)
    plan = load_plan_config()
    step_s = (job.minutes - plan.startup_minutes.train) * 60 / 313
    state_gb = resume_state_gb(job.estimate) * job.processes
    expected = (
        plan.stop_signal.factor * (step_s + state_gb / plan.stop_signal.write_gb_per_s) + plan.stop_signal.margin_s
    )
    assert job.stop_lead_s == math.ceil(expected)
    assert state_gb > 0 and step_s > 0
    # a slower file system asks for the signal earlier, by the state's write time
    slower = train_job(replacements, "stop_signal.write_gb_per_s=0.05")
    assert slower.stop_lead_s > job.stop_lead_s


def test_a_full_parameter_state_asks_for_a_longer_lead_than_lora() -> None:
    lora = train_job(small_grid(["micro_batch_size=1", "steps=313"]))
    full = small_grid(["micro_batch_size=1", "steps=313", "method.lora.enabled=false", "distributed.strategy=fsdp"])
    whole = train_job(full, "gpu_mem_gb=1000")
    assert resume_state_gb(whole.estimate) > 10 * resume_state_gb(lora.estimate)
    assert whole.stop_lead_s > lora.stop_lead_s


def test_the_train_rule_asks_slurm_for_the_planned_signal_within_half_its_limit() -> None:
    grid = load_grid(SCOPD, small_grid(["micro_batch_size=1", "steps=313"]))
    (output,) = grid.targets("train")
    lead, limit = planned_stop_leads(grid)[output], planned_runtimes(grid)[output]
    assert 0 < lead <= limit * 60 // 2
    resources = planned_resources(
        grid, grid, "train", ["runs/{experiment}/{model}/{method}/{pruner}/{budget}/checkpoint/config.json"]
    )
    wildcards = dict(zip(["experiment", "model", "method", "pruner", "budget"], output.split("/")[1:6], strict=True))
    assert resources["slurm_extra"](wildcards) == f"--signal=TERM@{lead}"
    assert "slurm_extra" not in planned_resources(grid, grid, "evaluate", ["x"])  # only training saves state
    # one node: sbatch --gpus=<n> alone may spread the GPUs over nodes, torchrun --standalone uses one
    assert resources["nodes"] == 1 and planned_resources(grid, grid, "evaluate", ["x"])["nodes"] == 1


def test_a_study_without_a_plan_asks_for_the_margin() -> None:
    grid = load_grid("tiny_demo")
    margin = load_plan_config().stop_signal.margin_s
    assert flat_resources(grid, grid, "train", [])["slurm_extra"] == f"--signal=TERM@{min(margin, 60 * 60 // 2)}"
    assert "slurm_extra" not in flat_resources(grid, grid, "evaluate", [])
    assert flat_resources(grid, grid, "train", [])["nodes"] == flat_resources(grid, grid, "evaluate", [])["nodes"] == 1


def test_a_per_leaf_job_is_planned_over_exactly_the_benchmarks_its_leaf_needs() -> None:
    replacements = small_grid(["micro_batch_size=1", "steps=313"])
    replacements["benchmarks"] = {"mme": {}, "pope": {}}
    main = copy.deepcopy(replacements["tables"]["main"])
    main["benchmarks"] = ["mme", "pope"]
    only_mme = {
        "models": ["qwen2_5_vl_7b"],
        "benchmarks": ["mme"],
        "rows": [{"methods": ["base"], "pruners": ["visionzip"], "budgets": [0.2]}],
    }
    replacements["tables"] = {"main": main, "sweep": only_mme}
    per_bench = plan_jobs(load_grid(SCOPD, {**replacements, "eval_jobs": "benchmark"}), load_plan_config())
    per_leaf = plan_jobs(load_grid(SCOPD, {**replacements, "eval_jobs": "leaf"}), load_plan_config())

    def per_bench_job(point: str, bench: str):
        return next(j for j in per_bench if j.rule == "evaluate_base" and j.point == point and j.bench == bench)

    def per_leaf_job(point: str):
        (job,) = [j for j in per_leaf if j.rule.startswith("evaluate_base") and j.point == point]
        return job

    # the leaf only the sweep names writes mme alone: the same job as the per-benchmark one
    sweep = per_leaf_job("visionzip 0.2")
    assert sweep.bench == "all" and [o.rsplit("/", 1)[1] for o in sweep.outputs] == ["mme.json"]
    assert math.isclose(sweep.minutes, per_bench_job("visionzip 0.2", "mme").minutes)
    # the full-context leaf writes both, in one process: both benchmarks' time, one start-up
    full = per_leaf_job("visionzip 1")
    assert [o.rsplit("/", 1)[1] for o in full.outputs] == ["mme.json", "pope.json"]
    mme, pope = (per_bench_job("visionzip 1", b) for b in ("mme", "pope"))
    startup = load_plan_config().startup_minutes.evaluate
    assert math.isclose(full.minutes, mme.minutes + pope.minutes - startup)
    assert sweep.rule != full.rule  # they write different benchmarks, so different rules (sparsectx.workflow.eval_jobs)
