"""The user's files a real preset's DAG declares as inputs (``sparsectx.workflow.inputs``), written as miniatures in
their real layouts (``sparsectx.rehearsal.data``: VLMEvalKit's TSVs, the training file's release layout), so a
dry run of the preset in an empty folder builds its whole DAG."""

from __future__ import annotations

from pathlib import Path

from sparsectx import workflow as wf
from sparsectx.rehearsal.data import write_benchmarks, write_training_file


def write_user_files(workdir: Path, experiment: str) -> None:
    """Returns None after writing the benchmark files of ``experiment`` into ``workdir/data/`` (where a benchmark
    without ``$LMUData`` is looked for) and its training file at its path under ``workdir``; nothing for a grid
    whose data job writes them."""
    grid = wf.load_grid(experiment)
    if not grid.preflight:
        return
    write_benchmarks(grid.names("bench"), workdir / "data")
    for path in grid.train_files():
        write_training_file(workdir / path)
