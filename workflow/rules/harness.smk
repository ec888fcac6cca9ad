"""VLMEvalKit's own scoring of a finished benchmark (docs/harnesses.md): asked for by path, never part of
all_tables; needs the environment `make vlmeval-env` builds."""


rule vlmeval_score:
    """Adds VLMEvalKit's evaluate (exact matching) to one benchmark's result JSON, beside the project's score."""
    input:
        result=wf.RESULT_PATTERN,
    output:
        touch(wf.RESULT_PATTERN.removesuffix(".json") + ".vlmeval.done"),
    log:
        wf.mirror(wf.RESULT_PATTERN, "logs", "vlmeval", ".log"),
    params:
        cli=wf.entry_point("vlmeval_score.py"),
    shell:
        "{params.cli} result={input.result:q} > {log} 2>&1"
