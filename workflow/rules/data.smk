"""Data: the synthetic benchmarks and training split of the tiny study (real experiments read the user's
VLMEvalKit TSVs named by conf/bench/*.yaml, which are not DAG inputs)."""


rule build_data:
    """Writes every benchmark TSV and train.tsv of conf/data/<config>.yaml (not the shipped processor)."""
    output:
        list(DATA.values()),
    log:
        f"logs/build_data/{GRID.data.get('config', 'none')}.log",
    benchmark:
        f"benchmarks/build_data/{GRID.data.get('config', 'none')}.tsv"
    params:
        cli=wf.entry_point("build_data.py"),
        args=["processor.write=false", *GRID.overrides("build_data")],
    threads: RES["build_data"]["cpus_per_task"]
    resources:
        **RES["build_data"],
    shell:
        "{params.cli} {params.args:q} > {log} 2>&1"
