"""``python -m sparsectx.plan experiment=<e> [gpu_mem_gb=<n>] [jobs=true] [grid_file=<yaml>]``: the study's plan;
exit 1 on a refusal.

``jobs=false`` leaves the per-job table out (the blocks, the memory breakdowns and the refusals stay);
``grid_file`` is the YAML a Snakemake ``--configfile`` would give: its ``grid:`` keys replace the preset's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from sparsectx.plan.jobs import plan_jobs
from sparsectx.plan.report import render
from sparsectx.plan.settings import load_plan_config
from sparsectx.workflow import load_grid


def main(argv: list[str]) -> int:
    """Prints the plan of the experiment named on the command line; returns 1 when any job is refused."""
    per_job = "jobs=false" not in argv
    grid_files = [a.split("=", 1)[1] for a in argv if a.startswith("grid_file=")]
    plan = load_plan_config([a for a in argv if not a.startswith(("jobs=", "grid_file="))])
    if plan.experiment is None:
        print(
            "usage: python -m sparsectx.plan experiment=<conf/experiment name> [gpu_mem_gb=<n>] [jobs=false] "
            "[grid_file=<yaml with a grid: mapping>]"
        )
        return 2
    replacements = {}
    for path in grid_files:
        replacements.update((yaml.safe_load(Path(path).read_text()) or {}).get("grid") or {})
    jobs = plan_jobs(load_grid(plan.experiment, replacements), plan)
    print(render(plan.experiment, jobs, plan, per_job))
    return 1 if any(job.refusal for job in jobs) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
