"""Tables and plots from every scheduled leaf; missing cells are footnoted by make_tables from the grid."""


localrules:
    all_tables,
    make_tables,
    build_data,
    full_context,
    sweep,
    train_all,
    eval_trained,
    passk_all,
    efficiency_all,


rule make_tables:
    """Renders results/<experiment>/tables/ (Markdown, LaTeX, CSV, PNG) from the finished leaves."""
    input:
        results=GRID.targets("full_context") + GRID.targets("sweep") + GRID.targets("trained"),
        passk=GRID.targets("passk"),
        efficiency=GRID.targets("efficiency"),
    output:
        directory(wf.TABLES_PATTERN),
    log:
        "logs/tables/{experiment}.log",
    benchmark:
        "benchmarks/tables/{experiment}.tsv"
    params:
        cli=wf.entry_point("make_tables.py"),
        args=wf.tables_args(GRID, workflow.configfiles),
    threads: RES["tables"]["cpus_per_task"]
    resources:
        **RES["tables"],
    shell:
        "{params.cli} {params.args:q} > {log} 2>&1"
