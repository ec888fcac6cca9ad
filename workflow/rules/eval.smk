"""Trained checkpoints: scores at their training budget, across budgets and across pruners; then the Pass@K
analysis and the efficiency measurements (which may also name the untrained model)."""


# One rule per group of leaves that write the same benchmarks under grid.eval_jobs: leaf (else one rule);
# sparsectx.workflow.eval_jobs names them and sets their outputs. Each training seed of grid.train_seeds other
# than grid.seed has its own rules: that seed's checkpoint (runs/seed<s>/) scored into results/seed<s>/, the tree
# make_tables reads for it (workflow/README.md, "Several training seeds").
for _kind in ("trained", "trained_seed"):
    for _eval in wf.eval_rules(GRID, _kind):

        rule:
            """Scores one trained checkpoint under one pruner and budget on one benchmark (grid.eval_jobs: leaf:
            on every benchmark its leaf needs)."""
            name:
                _eval.name
            input:
                preflight=PREFLIGHT,
                bench=lambda w: wf.inputs.greedy_inputs(GRID, DATA, wf.cell_of(w)),
                checkpoint=lambda w: GRID.checkpoint_inputs(wf.cell_of(w), wf.seed_of(w)),
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
                args=lambda w: wf.evaluate_args(GRID, wf.cell_of(w), seed=wf.seed_of(w)),
            threads: RES["evaluate"]["cpus_per_task"]
            resources:
                **rule_resources(GRID, PLAN_GRID, "evaluate", _eval.outputs),
            shell:
                "OMP_NUM_THREADS={threads} {params.cli} {params.args:q} > {log} 2>&1"


rule passk:
    """Fixed-context Pass@K of one cell; the cohort is what the full-context greedy run solved."""
    input:
        preflight=PREFLIGHT,
        bench=lambda w: wf.inputs.passk_inputs(GRID, DATA, wf.cell_of(w)),
        full_context=lambda w: GRID.reference_leaf(w.model, w.bench),
        checkpoint=lambda w: GRID.checkpoint_inputs(wf.cell_of(w)),
    output:
        wf.PASSK_PATTERN,
    log:
        wf.mirror(wf.PASSK_PATTERN, "logs", "passk", ".log"),
    benchmark:
        wf.mirror(wf.PASSK_PATTERN, "benchmarks", "passk", ".tsv")
    params:
        cli=wf.entry_point("evaluate.py"),
        args=lambda w: wf.evaluate_args(GRID, wf.cell_of(w), mode="passk"),
    threads: RES["passk"]["cpus_per_task"]
    resources:
        **rule_resources(GRID, PLAN_GRID, "passk", [wf.PASSK_PATTERN]),
    shell:
        "OMP_NUM_THREADS={threads} {params.cli} {params.args:q} > {log} 2>&1"


rule efficiency:
    """FLOPs, KV-cache size and stage latencies of one (model, method, pruner) at its budgets, relative to 1.0."""
    input:
        preflight=PREFLIGHT,
        bench=lambda w: wf.inputs.efficiency_inputs(GRID, DATA, GRID.efficiency_run(w.model, w.method, w.pruner)),
        checkpoint=lambda w: GRID.checkpoint_inputs(GRID.efficiency_run(w.model, w.method, w.pruner).cell),
    output:
        wf.EFFICIENCY_PATTERN,
    log:
        wf.mirror(wf.EFFICIENCY_PATTERN, "logs", "efficiency", ".log"),
    benchmark:
        wf.mirror(wf.EFFICIENCY_PATTERN, "benchmarks", "efficiency", ".tsv")
    params:
        cli=wf.entry_point("evaluate.py"),
        args=lambda w: wf.efficiency_args(GRID, GRID.efficiency_run(w.model, w.method, w.pruner)),
    threads: RES["efficiency"]["cpus_per_task"]
    resources:
        **rule_resources(GRID, PLAN_GRID, "efficiency", [wf.EFFICIENCY_PATTERN]),
    shell:
        "OMP_NUM_THREADS={threads} {params.cli} {params.args:q} > {log} 2>&1"


rule eval_trained:
    """Target: every result of a trained checkpoint."""
    input:
        GRID.targets("trained"),


rule passk_all:
    """Target: the Pass@K analysis."""
    input:
        GRID.targets("passk"),


rule efficiency_all:
    """Target: the efficiency measurements."""
    input:
        GRID.targets("efficiency"),
