"""The plan inside the DAG of a real study: its first job, and the SLURM time limits of every other job.

``write_plan`` is the ``plan`` rule (workflow/rules/plan.smk): it writes the plan where the study's results go and
stops the study, before the preflight and before any GPU job is submitted, when a job is refused (it cannot
launch, or its memory estimate exceeds the GPU memory the profile declares). ``with_planned_runtime`` gives a
rule's resources the runtime the plan derives for each job (``planned_runtimes``) instead of the grid's flat
``resources.<stage>.runtime`` (Snakemake hands a resource function the job's wildcards, not its outputs);
``with_planned_stop_signal`` gives a training job an early SIGTERM sized to save its state (``planned_stop_leads``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from sparsectx.io import atomic_write_text
from sparsectx.plan.limits import planned_runtimes, planned_stop_leads, study_jobs
from sparsectx.plan.report import render
from sparsectx.plan.settings import load_plan_config
from sparsectx.workflow import Grid, on_one_node, stop_signal_option


def write_plan(grid: Grid, out: str | Path, gpu_mem_gb: float | None = None) -> None:
    """Writes the plan of ``grid`` to ``out`` (Markdown) when no job is refused; else raises naming each one.

    Args:
        grid: the real study's grid (not the rehearsal's scaled one).
        out: where the report goes (``results/<experiment>/plan.md``).
        gpu_mem_gb: the GPU memory the profile declares (``default-resources: gpu_mem_gb``); None = conf/plan.yaml's.

    Raises:
        ValueError: some job cannot launch or cannot fit; the message lists each with the setting to change.
    """
    overrides = [] if gpu_mem_gb is None else [f"gpu_mem_gb={gpu_mem_gb:g}"]
    plan = load_plan_config(overrides)
    jobs = study_jobs(grid, tuple(overrides))
    refused = [job.refusal for job in jobs if job.refusal]
    if refused:
        raise ValueError(
            f"the plan of {grid.experiment} refuses {len(refused)} job(s) before anything is submitted "
            f"(python -m sparsectx.plan experiment={grid.experiment} prints the whole plan; docs/plan.md):\n  "
            + "\n  ".join(refused)
        )
    atomic_write_text(Path(out), render(grid.experiment, jobs, plan, per_job=True) + "\n")


def with_planned_runtime(grid: Grid, resources: Mapping[str, int], outputs: Sequence[str]) -> dict[str, object]:
    """Returns a rule's ``resources`` with ``runtime`` the plan's limit of the job (minutes: 1.5 x the planned time
    + 30, conf/plan.yaml ``margin``), found by the rule's output ``outputs`` patterns filled with the job's
    wildcards; an output the plan does not know keeps ``resources.runtime``."""
    fallback = resources["runtime"]

    def runtime(wildcards: Mapping[str, str]) -> int:
        limits = planned_runtimes(grid)
        values = dict(wildcards.items())
        return max(limits.get(pattern.format(**values), fallback) for pattern in outputs)

    planned: dict[str, object] = dict(resources)
    planned["runtime"] = runtime
    return planned


def with_planned_stop_signal(grid: Grid, resources: Mapping[str, object], outputs: Sequence[str]) -> dict[str, object]:
    """Returns a training rule's ``resources`` with ``slurm_extra`` asking SLURM for SIGTERM the plan's lead before
    the time limit (``--signal=TERM@<s>``, sbatch(1); the trainer saves and exits on it, the retry resumes)."""

    def slurm_extra(wildcards: Mapping[str, str]) -> str:
        leads = planned_stop_leads(grid)
        values = dict(wildcards.items())
        lead = max(leads.get(pattern.format(**values), 0) for pattern in outputs)
        return stop_signal_option(lead or load_plan_config().stop_signal.margin_s)

    return {**resources, "slurm_extra": slurm_extra}


def planned_resources(grid: Grid, plan_grid: Grid, stage: str, outputs: Sequence[str]) -> dict[str, object]:
    """Returns the resources of a ``stage`` rule of ``grid`` whose outputs are the ``outputs`` patterns, each job's
    runtime the limit the plan of ``plan_grid`` (the real study; the rehearsal's grid stands in for it) derives,
    and a training job's early SIGTERM its lead (``with_planned_stop_signal``), on one node (``on_one_node``)."""
    planned = with_planned_runtime(plan_grid, on_one_node(grid.resources[stage]), outputs)
    return with_planned_stop_signal(plan_grid, planned, outputs) if stage == "train" else planned
