"""Data: the synthetic benchmarks and training split of the tiny study (real experiments read the user's
VLMEvalKit TSVs named by conf/bench/*.yaml, declared as inputs by sparsectx.workflow.inputs)."""


rule build_data:
    """Writes every benchmark TSV and train.tsv of conf/data/<config>.yaml (not the shipped processor).

    Into data/<config>-<digest of the config and overrides>/, never data/<config>/ where a hand-run
    `python src/build_data.py` writes the full suite: prebuilt data is never taken for this job's.
    """
    output:
        list(DATA.values()),
    log:
        f"logs/build_data/{Path(GRID.data_dir() or 'none').name}.log",
    benchmark:
        f"benchmarks/build_data/{Path(GRID.data_dir() or 'none').name}.tsv"
    params:
        cli=wf.entry_point("build_data.py"),
        args=["processor.write=false", *wf.data_args(GRID, "build_data"), *GRID.overrides("build_data")],
    threads: RES["build_data"]["cpus_per_task"]
    resources:
        **RES["build_data"],
    shell:
        "{params.cli} {params.args:q} > {log} 2>&1"
