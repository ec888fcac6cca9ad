"""Reads an experiment's leaves into what the tables show: a score per declared cell, or why it has none.

Every cell a table block declares gets an entry. A supported cell's entry is the ``ResultRecord`` fields of its
result JSON (``sparsectx.eval.results.BenchResult``), or ``NO_RECORD`` when that file does not exist; an
unsupported cell's entry is the grid's declared reason (``Grid.reason``), whatever is on disk. Paths are
``sparsectx.paths`` functions of the results root, so a moved results tree reads the same. The score is the
project's scorer's (``score_source: sparsectx``) or, on request, VLMEvalKit's own ``evaluate`` of the same
predictions (``score_source: vlmeval``: the ``vlmeval`` block that ``src/vlmeval_score.py`` adds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from sparsectx.eval.efficiency import efficiency_path
from sparsectx.eval.passk_mode import passk_path
from sparsectx.io import read_json_object
from sparsectx.paths import BASE, leaf_dir, result_path
from sparsectx.report.tables import NO_RECORD, ResultRecord, check_versions
from sparsectx.workflow import Block, Cell, EfficiencyRun, Grid

SCORE_SOURCES = ("sparsectx", "vlmeval")
"""Where a table's scores come from: the project's scorers, or VLMEvalKit's (``docs/harnesses.md``)."""

RECORD_KEYS = ("method", "pruner", "budget", "benchmark", "score", "scorer_version", "extractor_version")
"""The ``BenchResult`` fields a table reads (the ``ResultRecord`` fields bar ``reason`` and ``caveat``)."""

Entry = dict[str, Any] | str
"""A cell's record fields, or the reason it has no score."""
RERUN_FIX = "results are written atomically, so rerun its job"
"""What restores a broken result file (``io.read_json_object``'s fix): a torn one is damage, never a write in
progress."""


def skip_caveat(payload: dict[str, Any]) -> str:
    """Returns the footnote of a result scored over fewer rows than its file holds, "" when none was skipped.

    The text names the counts and the first reason only, so every leaf that read the same file shares one
    footnote. A result JSON without ``skipped`` (one written by hand) counts as having none.
    """
    skipped = payload.get("skipped") or []
    if not skipped:
        return ""
    first = skipped[0]["reason"] if isinstance(skipped[0], dict) else str(skipped[0])
    return (
        f"scored on {payload['n_scored']} of {payload['n_rows']} rows ({len(skipped)} unusable rows of the "
        f"benchmark file skipped, first: {first})"
    )


def vlmeval_score(path: Path, payload: dict[str, Any]) -> float:
    """Returns VLMEvalKit's headline score of the result ``payload`` read from ``path``.

    Raises:
        ValueError: the result has no VLMEvalKit score yet (or VLMEvalKit gives its benchmark no headline),
            naming the command that adds it.
    """
    block = payload.get("vlmeval") or {}
    if block.get("score") is None:
        reason = "VLMEvalKit gives this benchmark no headline" if block else "it was never scored by VLMEvalKit"
        raise ValueError(
            f"{path} has no VLMEvalKit score ({reason}); with score_source=vlmeval every table cell needs one: "
            f"run `python src/vlmeval_score.py result={path}` (docs/harnesses.md) or use score_source=sparsectx"
        )
    return float(block["score"])


def read_result(path: Path, cell: Cell, score_source: str = "sparsectx") -> dict[str, Any]:
    """Returns the ``RECORD_KEYS`` of the result JSON at ``path``, checked against the cell it should hold,
    plus its ``caveat`` (``skip_caveat``); ``score`` from the project's scorer or from VLMEvalKit's block."""
    payload = read_json_object(path, RERUN_FIX)
    absent = [key for key in RECORD_KEYS if key not in payload]
    if absent:
        raise ValueError(f"{path} lacks the result keys {absent}; it is not a BenchResult JSON")
    found = (payload["method"], payload["pruner"], float(payload["budget"]), payload["benchmark"])
    wanted = (cell.method, cell.pruner, cell.budget, cell.bench)
    if found != wanted:
        raise ValueError(
            f"{path} holds method/pruner/budget/benchmark {found}, but its path names {wanted}; "
            "delete it and rerun its evaluation"
        )
    record = {**{key: payload[key] for key in RECORD_KEYS}, "caveat": skip_caveat(payload)}
    if score_source == "vlmeval":
        record["score"] = vlmeval_score(path, payload)
    return record


def cell_leaf(root: str | Path, experiment: str, cell: Cell) -> Path:
    """Returns the leaf directory of ``cell`` under the results root ``root``."""
    return leaf_dir(root, experiment, cell.model, cell.method, cell.pruner, cell.budget)


def collect_results(grid: Grid, root: str | Path, score_source: str = "sparsectx") -> dict[Cell, Entry]:
    """Returns the entry of every cell of every table block (records, ``NO_RECORD`` or declared reasons),
    scored as ``score_source`` says (``SCORE_SOURCES``)."""
    entries: dict[Cell, Entry] = {}
    for block in (b for b in grid.blocks if b.kind == "table"):
        for cell in grid.block_cells(block):
            if cell in entries:
                continue
            reason = grid.reason(cell)
            path = result_path(cell_leaf(root, grid.experiment, cell), cell.bench)
            if reason is not None:
                entries[cell] = reason
            elif not path.is_file():
                entries[cell] = NO_RECORD
            else:
                entries[cell] = read_result(path, cell, score_source)
    return entries


def ordered_cells(grid: Grid, block: Block, model: str) -> list[Cell]:
    """Returns the cells of ``block`` for ``model`` in display order: the full-context reference cells
    (not for efficiency blocks), then each row's methods x pruners x budgets x benchmarks as declared."""
    cells = []
    if block.kind != "efficiency":
        cells = [Cell(model, BASE, grid.reference_pruner, 1.0, bench) for bench in block.benchmarks]
    for row in block.rows:
        for method in row.methods:
            for pruner in row.pruners:
                cells += [Cell(model, method, pruner, b, bench) for b in row.budgets for bench in block.benchmarks]
    return list(dict.fromkeys(cells))


def method_label(method: str, labels: Mapping[str, str]) -> str:
    """Returns the displayed name of a method: ``labels[method]``, or the method key when it has none."""
    return labels.get(method, method)


def record_of(entry: Mapping[str, Any]) -> ResultRecord:
    """Returns the ``ResultRecord`` of a scored entry (a pooled entry's per-seed fields are left out)."""
    return ResultRecord(**{f.name: entry[f.name] for f in fields(ResultRecord) if f.name in entry})


def block_records(
    grid: Grid, block: Block, model: str, entries: Mapping[Cell, Entry], labels: Mapping[str, str]
) -> list[ResultRecord]:
    """Returns one ``ResultRecord`` per cell of ``block`` for ``model``, in display order.

    A cell without a score becomes a record with ``score=None`` and its reason (the footnote), carrying the
    versions of its benchmark's scored records so ``check_versions`` sees one version per benchmark.
    """
    cells = ordered_cells(grid, block, model)
    # build_table orders a method's pruners by first appearance: the reference cells go last, so the rows keep
    # the grid's pruner order (the 100% block still opens the table, and Vanilla each block).
    reference = [c for c in cells if c.method == BASE and c.budget == 1.0]
    cells = [c for c in cells if c not in reference] + reference
    scored = [record_of(entries[c]) for c in cells if isinstance(entries[c], dict)]
    versions = check_versions(scored)
    records = []
    for cell in cells:
        entry = entries[cell]
        label = method_label(cell.method, labels)
        if isinstance(entry, dict):
            records.append(record_of({**entry, "method": label}))
        else:
            # a benchmark with no record: nothing to mix
            scorer, extractor = versions.get(cell.bench, (0, None))
            records.append(ResultRecord(label, cell.pruner, cell.budget, cell.bench, None, scorer, extractor, entry))
    return records


def score_of(entries: Mapping[Cell, Entry], cell: Cell) -> tuple[float | None, str]:
    """Returns ``(score, "")`` of ``cell``, or ``(None, reason)``; a cell in no table block is a reason too."""
    entry = entries.get(cell)
    if entry is None:
        return None, "in no table block of the grid, so never evaluated"
    if isinstance(entry, str):
        return None, entry
    return float(entry["score"]), ""


def read_passk(root: str | Path, experiment: str, cell: Cell) -> dict[str, Any] | None:
    """Returns the Pass@K JSON of ``cell`` (``sparsectx.eval.passk_mode``), or None if it does not exist."""
    path = passk_path(cell_leaf(root, experiment, cell), cell.bench)
    return read_json_object(path, RERUN_FIX) if path.is_file() else None


def read_efficiency(root: str | Path, experiment: str, run: EfficiencyRun) -> dict[str, Any] | None:
    """Returns the efficiency JSON of ``run`` (``sparsectx.eval.efficiency``), or None if it does not exist."""
    path = efficiency_path(root, experiment, run.model, run.method, run.pruner)
    return read_json_object(path, RERUN_FIX) if path.is_file() else None
