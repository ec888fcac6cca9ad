"""The study report's item browser: per model and benchmark, items with their image, question, reference and every
evaluated row's answer, correctness and output (``sparsectx.report.html_report``).

The rows are the greedy results found under ``<results_root>/<experiment>/`` (``sparsectx.report.discover``), each
leaf's ``<bench>.predictions.jsonl`` beside its result JSON. The image, question, options and reference come from
the benchmark file the full-context untrained row (``base`` at budget 1, else the first row) was scored on, read
as ``evaluate.py`` read it and checked unchanged by its sha256 (``sparsectx.report.items.result_bench``). A row
scored on another version of that file, or without its predictions, is named in the benchmark's notes instead.
At most ``cap`` items per model and benchmark are kept: evenly spaced over the file, so every part of a benchmark
sorted by category or subset is shown.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparsectx.eval.protocol import sample_id
from sparsectx.io import read_json_object, read_jsonl
from sparsectx.paths import BASE, budget_tag, predictions_path, result_path
from sparsectx.report.collect import RERUN_FIX, cell_leaf, method_label
from sparsectx.report.discover import Found
from sparsectx.report.examples import THUMBNAIL_PX
from sparsectx.report.items import Benches, result_bench
from sparsectx.workflow import Cell


@dataclass(frozen=True)
class Answer:
    """One evaluated row's answer to one item."""

    method: str
    label: str
    """The method's displayed name (``conf/make_tables.yaml``'s ``method_labels``)."""
    pruner: str
    budget: float
    answer: str
    correct: bool | None
    """The scorer's verdict as ``evaluate.py`` recorded it; None when the row records none."""
    output: str
    """The model's raw output, cut to ``output_chars`` characters (marked with " …" when cut)."""


@dataclass(frozen=True)
class BrowsedItem:
    """One benchmark item and every row's answer to it."""

    model: str
    bench: str
    item_id: str
    question: str
    options: Mapping[str, str]
    reference: str
    image: str | None
    """The item's picture (a video's first frame) as a data URI; None when the row has none."""
    answers: tuple[Answer, ...]


@dataclass(frozen=True)
class BenchItems:
    """The items of one model and benchmark shown in the browser, how many the file holds, and the notes."""

    model: str
    bench: str
    total: int
    items: tuple[BrowsedItem, ...]
    notes: tuple[str, ...]


def spaced(ids: list[str], cap: int) -> list[str]:
    """Returns at most ``cap`` of ``ids``, evenly spaced and in order (all of them when there are fewer)."""
    if len(ids) <= cap:
        return ids
    return [ids[i * len(ids) // cap] for i in range(cap)]


def row_order(cell: Cell) -> tuple[bool, str, str, float]:
    """Returns the sort key of a row: the untrained model first, then by method and pruner, budgets decreasing."""
    return (cell.method != BASE, cell.method, cell.pruner, -cell.budget)


def thumbnail_uri(image: Any) -> str | None:
    """Returns ``image`` (a PIL image, or None) shrunk to ``THUMBNAIL_PX`` as a PNG or JPEG data URI, whichever is
    smaller (flat synthetic pictures compress best as PNG, photographs as JPEG)."""
    if image is None:
        return None
    with image:
        small = image.convert("RGB")
    small.thumbnail((THUMBNAIL_PX, THUMBNAIL_PX))
    encoded = []
    for kind, options in (("png", {}), ("jpeg", {"quality": 85})):
        data = io.BytesIO()
        small.save(data, format=kind.upper(), **options)
        encoded.append((len(data.getvalue()), kind, data.getvalue()))
    _, kind, data = min(encoded)
    return f"data:image/{kind};base64,{base64.b64encode(data).decode('ascii')}"


def _short(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars] + " …"


def _answers(
    cell: Cell, root: Path, experiment: str, sha: str, labels: Mapping[str, str], chars: int
) -> dict[str, Answer] | str:
    """Returns sample id -> the row's answer, or why the row cannot be shown."""
    leaf = cell_leaf(root, experiment, cell)
    recorded = (read_json_object(result_path(leaf, cell.bench), RERUN_FIX).get("provenance") or {}).get("inputs") or {}
    if recorded.get("bench_sha256") != sha:
        return "scored on another version of the benchmark file (its sha256 differs), so its item ids may not match"
    path = predictions_path(leaf, cell.bench)
    if not path.is_file():
        return f"no per-item predictions ({path})"
    answers = {}
    for row in read_jsonl(path):
        correct = row.get("correct")
        answers[str(row["id"])] = Answer(
            cell.method,
            method_label(cell.method, labels),
            cell.pruner,
            cell.budget,
            str(row.get("answer") or ""),
            None if correct is None else bool(correct),
            _short(str(row.get("output") or ""), chars),
        )
    return answers


def bench_items(
    found: Found, model: str, bench: str, labels: Mapping[str, str], cap: int, chars: int, benches: Benches
) -> BenchItems:
    """Returns the browser's items of ``model`` on ``bench``: at most ``cap``, each with every row's answer, the
    outputs cut to ``chars`` characters; ``benches`` caches the benchmark files read."""
    cells = sorted((c for c in found.results if c.model == model and c.bench == bench), key=row_order)
    root, experiment = found.folder.parent, found.folder.name
    source = next((c for c in cells if c.method == BASE and c.budget == 1.0), cells[0])
    payload = read_json_object(result_path(cell_leaf(root, experiment, source), bench), RERUN_FIX)
    read = result_bench(payload, benches)
    if isinstance(read, str):
        where = f"{source.method} / {source.pruner} / {budget_tag(source.budget)}"
        return BenchItems(
            model,
            bench,
            0,
            (),
            (f"no items shown (they are read from the benchmark file {where} was scored on): {read}",),
        )
    items = {sample_id(item): item for item in read[1]}
    sha = payload["provenance"]["inputs"]["bench_sha256"]
    rows, notes = [], []
    for cell in cells:
        answers = _answers(cell, root, experiment, sha, labels, chars)
        if isinstance(answers, str):
            label = method_label(cell.method, labels)
            notes.append(f"{label} / {cell.pruner} / {budget_tag(cell.budget)}: not shown, {answers}")
        else:
            rows.append(answers)
    shown = []
    for item_id in spaced(list(items), cap):
        item = items[item_id]
        answers = tuple(by_id[item_id] for by_id in rows if item_id in by_id)
        shown.append(
            BrowsedItem(
                model,
                bench,
                item_id,
                item.question,
                item.options,
                item.answer,
                thumbnail_uri(item.thumbnail()),
                answers,
            )
        )
    return BenchItems(model, bench, len(items), tuple(shown), tuple(notes))


def browse(found: Found, labels: Mapping[str, str], cap: int, chars: int) -> list[BenchItems]:
    """Returns the browser's items of every model and benchmark with results in ``found``, in name order."""
    benches: Benches = {}
    pairs = sorted({(cell.model, cell.bench) for cell in found.results})
    return [bench_items(found, model, bench, labels, cap, chars, benches) for model, bench in pairs]
