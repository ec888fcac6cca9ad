"""A job that cannot launch or cannot fit is refused before submission, naming the job and the setting to change;
the SLURM limits cover every declared output."""

from __future__ import annotations

import copy

from sparsectx.plan.jobs import plan_jobs
from sparsectx.plan.limits import planned_runtimes, requested_runtime_minutes
from sparsectx.plan.settings import load_plan_config
from sparsectx.workflow import load_grid
from sparsectx.workflow.config import CONF_DIR, load_yaml

PRESET = load_yaml(CONF_DIR / "experiment" / "scopd_qwen2_5_vl_7b.yaml")["grid"]


def small_grid(train: list[str], train_gpus: int = 4) -> dict:
    """Returns grid replacements: SCOPD on Qwen2.5-VL-7B, one benchmark, with ``train`` as the train overrides
    after the preset's training file (the tiny synthetic set is refused a real model: sparsectx.train_data_check)."""
    resources = copy.deepcopy(PRESET["resources"])
    resources["train"]["gpu"] = train_gpus
    training_file = [o for o in PRESET["overrides"]["train"] if o.startswith("train_data.path=")]
    overrides = {**PRESET["overrides"], "train": [*training_file, *train]}
    return {
        "models": {"qwen2_5_vl_7b": {}},
        "pruners": {"visionzip": {}},
        "benchmarks": {"mme": {}},
        "methods": {"scopd": {"pruner": "visionzip", "budgets": [0.1]}},
        "tables": {
            "main": {
                "models": ["qwen2_5_vl_7b"],
                "benchmarks": ["mme"],
                "rows": [{"methods": ["base", "scopd"], "pruners": ["visionzip"], "budgets": [1.0, 0.1]}],
            }
        },
        "passk": None,
        "report": {},
        "overrides": overrides,
        "resources": resources,
    }


def refusals(replacements: dict, *overrides: str) -> list[str]:
    jobs = plan_jobs(load_grid("scopd_qwen2_5_vl_7b", replacements), load_plan_config(list(overrides)))
    return [job.refusal for job in jobs if job.refusal]


def test_the_preset_settings_plan_clean() -> None:
    assert refusals(small_grid(["micro_batch_size=1", "steps=313"])) == []


def test_an_effective_batch_that_does_not_divide_over_the_processes_is_refused() -> None:
    (message,) = refusals(small_grid(["micro_batch_size=1"], train_gpus=3))
    assert message.startswith("train runs/scopd_qwen2_5_vl_7b/qwen2_5_vl_7b/scopd/visionzip/0.1/checkpoint/config.json")
    assert "cannot launch on 3 processes" in message and "micro_batch_size" in message


def test_a_job_over_the_gpu_memory_is_refused_with_the_switch_that_fits_it() -> None:
    (message,) = refusals(small_grid(["micro_batch_size=8", "max_new_tokens=1024"]))
    assert "train runs/scopd_qwen2_5_vl_7b/qwen2_5_vl_7b/scopd/" in message and "exceeds 77 GB usable" in message
    assert "set memory.activation_checkpointing=true" in message
    assert refusals(small_grid(["micro_batch_size=8", "max_new_tokens=1024"]), "gpu_mem_gb=141") == []


def test_limits_cover_every_output_with_the_margin() -> None:
    grid = load_grid("scopd_qwen2_5_vl_7b", small_grid(["micro_batch_size=1"]))
    limits = planned_runtimes(grid)
    outputs = {out for stage in ("full_context", "sweep", "train", "trained") for out in grid.targets(stage)}
    assert outputs <= set(limits)
    assert all(minutes >= 30 for minutes in limits.values())
    assert requested_runtime_minutes(60, 1.5, 30) == 120 and requested_runtime_minutes(0.1, 1.5, 0) == 1
