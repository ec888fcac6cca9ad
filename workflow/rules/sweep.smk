"""Untrained model: the full-context reference (budget 1) and every training-free pruner x budget."""


# One rule per group of leaves that write the same benchmarks under grid.eval_jobs: leaf (else one rule);
# sparsectx.workflow.eval_jobs names them and sets their outputs.
for _eval in wf.eval_rules(GRID, "base"):

    rule:
        """Scores the untrained model under one pruner and budget on one benchmark (grid.eval_jobs: leaf: on
        every benchmark its leaf needs)."""
        name:
            _eval.name
        input:
            preflight=PREFLIGHT,
            bench=lambda w: wf.inputs.greedy_inputs(GRID, DATA, wf.cell_of(w)),
        output:
            _eval.outputs,
        log:
            _eval.log,
        benchmark:
            _eval.benchmark
        wildcard_constraints:
            **_eval.constraints,
        params:
            cli=wf.evaluate_command(GRID),
            args=lambda w: wf.evaluate_args(GRID, wf.cell_of(w)),
        threads: RES["evaluate"]["cpus_per_task"]
        resources:
            **rule_resources(GRID, PLAN_GRID, "evaluate", _eval.outputs),
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
