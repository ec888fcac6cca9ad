"""The plan as text: one line per job, GPU-hours per block and for the study beside today's SLURM requests,
the notes on scaled figures, and the refusals."""

from __future__ import annotations

from collections import defaultdict

from omegaconf import DictConfig

from sparsectx.plan.jobs import Job
from sparsectx.plan.limits import requested_runtime_minutes

HEADER = (
    "| rule | model | method | pruner budget | bench | GPUs x procs | peak GB/GPU | planned h | limit h | today h |"
)


def job_lines(jobs: list[Job], plan: DictConfig) -> list[str]:
    """Returns the per-job table (Markdown): peak memory, planned wall time, the derived and today's limits."""
    lines = [HEADER, "| --- " * 10 + "|"]
    for job in jobs:
        peak = "-" if job.estimate is None else f"{job.estimate.peak_gb:.1f}"
        limit = requested_runtime_minutes(job.minutes, plan.margin.factor, plan.margin.minutes)
        flag = " REFUSED" if job.refusal else ""
        lines.append(
            f"| {job.rule}{flag} | {job.model} | {job.method} | {job.point} | {job.bench} | {job.gpus} x "
            f"{job.processes} | {peak} | {job.minutes / 60:.2f} | {limit / 60:.1f} | {job.requested / 60:.1f} |"
        )
    return lines


def block_lines(jobs: list[Job]) -> list[str]:
    """Returns GPU-hours per block (planned and as requested today) and the study's totals."""
    planned, requested, count = defaultdict(float), defaultdict(float), defaultdict(int)
    for job in jobs:
        planned[job.block] += job.gpu_hours
        requested[job.block] += job.requested_gpu_hours
        count[job.block] += 1
    lines = ["| block | jobs | planned GPU-h | requested today GPU-h |", "| --- | --: | --: | --: |"]
    lines += [f"| {b} | {count[b]} | {planned[b]:,.1f} | {requested[b]:,.1f} |" for b in planned]
    lines.append(f"| **study** | {len(jobs)} | **{sum(planned.values()):,.1f}** | **{sum(requested.values()):,.1f}** |")
    return lines


def breakdown_lines(jobs: list[Job]) -> list[str]:
    """Returns each distinct memory breakdown once (per rule and model), with the methods that share it."""
    groups: dict[tuple[str, str, tuple], list[str]] = {}
    for job in jobs:
        if job.estimate is None or not job.gpus:
            continue
        key = (job.rule.removesuffix("_seed"), job.model, tuple(job.estimate.breakdown().items()))
        groups.setdefault(key, []).append(job.method)
    lines = []
    for (rule, model, terms), methods in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        total = sum(v for _, v in terms)
        names = ", ".join(sorted(set(methods))) if rule.startswith("train") else f"{len(methods)} jobs"
        lines.append(f"- {rule} {model} [{names}]: {total:.1f} GB = " + ", ".join(f"{k} {v:.1f}" for k, v in terms))
    return lines


def render(experiment: str, jobs: list[Job], plan: DictConfig, per_job: bool) -> str:
    """Returns the whole report of ``experiment``'s plan."""
    refused = [j for j in jobs if j.refusal]
    notes = sorted({f"{j.model}: {n}" for j in jobs for n in j.notes})
    parts = [
        f"# Plan of {experiment}: {len(jobs)} jobs, GPU memory {plan.gpu_mem_gb:g} GB "
        f"({plan.unallocatable_gb:g} GB unallocatable), limits {plan.margin.factor:g} x planned + "
        f"{plan.margin.minutes} min",
        "",
        *(job_lines(jobs, plan) + [""] if per_job else []),
        "## Peak memory, largest job per rule, model and method (GB)",
        *breakdown_lines(jobs),
        "",
        "## GPU-hours per block (a job counted once, in the first block of grid.blocks that needs it)",
        *block_lines(jobs),
        "",
        "## Scaled figures",
        *([f"- {n}" for n in notes] or ["- none: every job has its architecture's own measured figure"]),
        "",
        f"## Refused: {len(refused)}",
        *[f"- {j.refusal}" for j in refused],
    ]
    return "\n".join(parts)
