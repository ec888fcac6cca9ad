"""Training: one run per (model, method, training pruner, training budget) that some scheduled cell evaluates.

The declared output is the final checkpoint's config.json (the directory is swapped in atomically).
The resume state runs/.../state/ is not an output, so a failed or killed job never deletes what a rerun
resumes from.
"""


rule train:
    """Trains one method at its budget and exports runs/<...>/checkpoint/."""
    input:
        preflight=PREFLIGHT,
        train=lambda w: wf.inputs.train_inputs(GRID, DATA, wf.run_of(w)),
    output:
        wf.CHECKPOINT_PATTERN,
    log:
        wf.mirror(wf.CHECKPOINT_PATTERN, "logs", "train", ".log"),
    benchmark:
        wf.mirror(wf.CHECKPOINT_PATTERN, "benchmarks", "train", ".tsv")
    wildcard_constraints:
        method=GRID.constraint("method", exclude=[wf.BASE]),
    params:
        cli=wf.train_command(GRID),
        args=lambda w: wf.train_args(GRID, wf.run_of(w)),
    threads: RES["train"]["cpus_per_task"]
    resources:
        **rule_resources(GRID, PLAN_GRID, "train", [wf.CHECKPOINT_PATTERN]),
    shell:
        "OMP_NUM_THREADS={threads} {params.cli} {params.args:q} > {log} 2>&1"


rule train_all:
    """Target: every training run."""
    input:
        GRID.targets("train"),


# Each training seed of grid.train_seeds other than grid.seed: the same runs of the tables' trained cells,
# with seed=<s>, into runs/seed<s>/ (workflow/README.md, "Several training seeds").
use rule train as train_seed with:
    output:
        wf.SEED_CHECKPOINT_PATTERN,
    log:
        wf.mirror(wf.SEED_CHECKPOINT_PATTERN, "logs", "train", ".log"),
    benchmark:
        wf.mirror(wf.SEED_CHECKPOINT_PATTERN, "benchmarks", "train", ".tsv")
    params:
        cli=wf.train_command(GRID),
        args=lambda w: wf.train_args(GRID, wf.run_of(w), wf.seed_of(w)),
