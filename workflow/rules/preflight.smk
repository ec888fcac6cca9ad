"""The preflight: the first job of a study on the user's inputs (grid.data.build false), so that a missing or
broken checkpoint, benchmark file or training file fails in seconds, before any GPU job is queued.

A local rule: it runs where Snakemake runs, with no GPU, and every train and evaluation job waits for its
report (Grid.preflight_inputs). Grids whose data job writes their benchmarks (the tiny studies) have none.

The user's files (VLMEvalKit's benchmark TSVs, the training file) are declared inputs of the preflight and of each
job that reads them (sparsectx.workflow.inputs, wf.inputs below and in the other rule files): a missing one stops
the DAG, `snakemake -n` included, naming every missing file and the setting that points at it; a changed one
reruns the jobs that read it.
"""

import sparsectx.workflow.inputs  # wf.inputs: each job's declared input files


if GRID.preflight:

    localrules:
        preflight,

    rule preflight:
        """Checks every scheduled model's checkpoint folder, benchmark file and the training file
        (python src/preflight.py); writes its JSON report only when every input passed."""
        input:
            plan=GRID.plan_output(),
            files=lambda w: wf.inputs.preflight_inputs(GRID),
        output:
            wf.PREFLIGHT_PATTERN,
        log:
            "logs/preflight/{experiment}.log",
        params:
            cli=wf.entry_point("preflight.py"),
            args=wf.preflight_args(GRID),
        shell:
            "{params.cli} {params.args:q} > {log} 2>&1 || (tail -n 40 {log} >&2; exit 1)"
