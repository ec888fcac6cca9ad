"""The sparsectx study as a DAG; the default target is all_tables.

plan and preflight (real inputs only) -> data -> full-context evaluation -> training-free pruning sweeps -> training -> evaluation of every trained
checkpoint -> Pass@K -> efficiency -> tables. Which leaves exist is decided by sparsectx.workflow from the
`grid:` block of conf/experiment/<experiment>.yaml (workflow/README.md explains the layout).

    snakemake --profile workflow/profiles/local all_tables                        # tiny, CPU
    snakemake --profile slurm all_tables --config experiment=scopd_qwen2_5_vl_7b
    snakemake -n all_tables --config experiment=ltopd_qwen3_5_4b                 # list the jobs (names missing files)
"""

from pathlib import Path

from snakemake.utils import min_version

min_version("8.20")


configfile: Path(workflow.basedir) / "workflow" / "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/plan.smk"
include: "workflow/rules/preflight.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/sweep.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/eval.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/harness.smk"


rule all_tables:
    """Default target: the experiment's tables and every leaf behind them.

    The leaves are listed too because Snakemake does not rerun a job for a missing input whose consumer's
    output is up to date: without them, a deleted result would stay deleted under existing tables.
    """
    default_target: True
    input:
        tables=GRID.tables_dir(),
        leaves=[leaf for stage in wf.TARGET_STAGES for leaf in GRID.targets(stage)],
