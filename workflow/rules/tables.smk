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


localrules:
    html_report,


rule html_report:
    """The study as one self-contained HTML page (docs/report.md): protocol card, tables, plots, and an item browser
    of every leaf's predictions. Not part of all_tables (make demo's outputs stay as they are): the target
    `snakemake --profile workflow/profiles/local html_report` runs the study and its tables first when needed."""
    input:
        tables=GRID.tables_dir(),
        leaves=[leaf for stage in wf.TARGET_STAGES for leaf in GRID.targets(stage)],
    output:
        f"results/{GRID.experiment}/report.html",
    log:
        f"logs/html_report/{GRID.experiment}.log",
    params:
        cli=wf.entry_point("make_html_report.py"),
        args=[f"experiment={GRID.experiment}"],
    shell:
        "{params.cli} {params.args:q} > {log} 2>&1"
