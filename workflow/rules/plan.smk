"""The plan: the first job of a study on the user's inputs (grid.data.build false), before the preflight.

It writes results/<experiment>/plan.md (every job's GPUs, per-GPU peak memory, planned hours and SLURM limit;
GPU-hours per block and for the study: docs/plan.md) and stops the study when a job cannot launch or cannot fit
the GPU memory the profile declares (default-resources gpu_mem_gb), naming the job and the setting to change.
A local rule: nothing is queued before it passes.
"""


if GRID.preflight:

    localrules:
        plan,

    rule plan:
        """Plans every job of the study (sparsectx.plan.dag.write_plan); refuses the study if a job cannot run."""
        output:
            wf.PLAN_PATTERN,
        log:
            "logs/plan/{experiment}.log",
        run:
            from sparsectx.plan.dag import write_plan

            write_plan(PLAN_GRID, output[0], getattr(resources, "gpu_mem_gb", None))
