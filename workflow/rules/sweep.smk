"""Untrained model: the full-context reference (budget 1) and every training-free pruner x budget."""


rule evaluate_base:
    """Scores the untrained model on one benchmark (grid.eval_jobs: leaf: on every benchmark) under one pruner
    and budget."""
    input:
        preflight=PREFLIGHT,
        bench=lambda w: wf.inputs.greedy_inputs(GRID, DATA, wf.cell_of(w)),
    output:
        GRID.eval_outputs(wf.RESULT_PATTERN),
    log:
        GRID.eval_side_file(wf.RESULT_PATTERN, "logs", ".log"),
    benchmark:
        GRID.eval_side_file(wf.RESULT_PATTERN, "benchmarks", ".tsv")
    wildcard_constraints:
        method=wf.BASE,
    params:
        cli=wf.evaluate_command(GRID),
        args=lambda w: wf.evaluate_args(GRID, wf.cell_of(w)),
    threads: RES["evaluate"]["cpus_per_task"]
    resources:
        **rule_resources(GRID, PLAN_GRID, "evaluate", GRID.eval_outputs(wf.RESULT_PATTERN)),
    shell:
        "OMP_NUM_THREADS={threads} {params.cli} {params.args:q} > {log} 2>&1"


rule full_context:
    """Target: the untrained model at budget 1 (every table's reference row)."""
    input:
        GRID.targets("full_context"),


rule sweep:
    """Target: the training-free pruning sweeps."""
    input:
        GRID.targets("sweep"),
