"""SLURM time limits derived from the plan: what the Snakemake rules can ask for instead of a flat runtime.

``planned_runtimes(grid)`` maps each job's declared output (the strings ``Grid.checkpoint_marker``, ``Grid.leaf``,
``Grid.preflight_output`` and ``Grid.tables_dir`` return) to ``requested_runtime_minutes`` of its planned time.
``planned_stop_leads(grid)`` maps each training job's output to how long before that limit SLURM warns it
(``--signal=TERM@<lead>``, sized to finish a step and save the resume state). ``study_jobs`` caches the plan per
grid object: the Snakefile is parsed often, and one plan takes seconds.
"""

from __future__ import annotations

import math
import weakref

from sparsectx.plan.jobs import Job, plan_jobs
from sparsectx.plan.settings import load_plan_config
from sparsectx.workflow import Grid


def requested_runtime_minutes(estimate_minutes: float, factor: float, minutes: float) -> int:
    """Returns the SLURM time limit for a job planned at ``estimate_minutes``: ``factor`` x the plan +
    ``minutes``, rounded up to a whole minute (conf/plan.yaml ``margin``: 1.5 x + 30 min)."""
    if estimate_minutes < 0 or factor < 1 or minutes < 0:
        raise ValueError(f"estimate {estimate_minutes}, margin factor {factor} (>= 1), minutes {minutes} (>= 0)")
    return math.ceil(factor * estimate_minutes + minutes)


_CACHE: weakref.WeakKeyDictionary[Grid, dict[tuple[str, ...], list[Job]]] = weakref.WeakKeyDictionary()
_LIMITS: weakref.WeakKeyDictionary[Grid, dict[tuple[str, ...], dict[str, int]]] = weakref.WeakKeyDictionary()


def study_jobs(grid: Grid, overrides: tuple[str, ...] = ()) -> list[Job]:
    """Returns every job of ``grid`` with its estimates under conf/plan.yaml ``overrides``, computed once per grid
    object and overrides: the Snakefile is parsed often, and one plan of a real study takes seconds."""
    per_grid = _CACHE.setdefault(grid, {})
    if overrides not in per_grid:
        per_grid[overrides] = plan_jobs(grid, load_plan_config(list(overrides)))
    return per_grid[overrides]


def planned_runtimes(grid: Grid, overrides: tuple[str, ...] = ()) -> dict[str, int]:
    """Returns {declared output path: SLURM runtime in minutes} for every job of ``grid`` (a job with several
    outputs, a per-leaf evaluation, gives each the job's limit). Refused jobs get their planned time too: the
    refusal is the plan rule's and ``python -m sparsectx.plan``'s to report.

    Args:
        grid: the study grid the Snakefile built.
        overrides: conf/plan.yaml overrides (``margin.factor=2``).
    """
    if overrides not in _LIMITS.setdefault(grid, {}):
        plan = load_plan_config(list(overrides))
        limits = {}
        for job in study_jobs(grid, overrides):
            minutes = requested_runtime_minutes(job.minutes, plan.margin.factor, plan.margin.minutes)
            limits.update(dict.fromkeys(job.outputs, minutes))
        _LIMITS[grid][overrides] = limits
    return _LIMITS[grid][overrides]


def planned_stop_leads(grid: Grid, overrides: tuple[str, ...] = ()) -> dict[str, int]:
    """Returns {declared output path: seconds before the time limit that SLURM sends SIGTERM} for every training
    job of ``grid`` (``sparsectx.plan.jobs.stop_signal_lead_s``), never more than half the job's time limit."""
    limits = planned_runtimes(grid, overrides)
    leads = {}
    for job in study_jobs(grid, overrides):
        if job.stop_lead_s is not None:
            for output in job.outputs:
                leads[output] = min(job.stop_lead_s, limits[output] * 60 // 2)
    return leads
