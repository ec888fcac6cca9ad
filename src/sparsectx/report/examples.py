"""A qualitative page of one table block: sampled items with their image, question, reference and every row's
answer (``grid.report`` entries of kind ``examples``).

Per model and benchmark of the block, ``items`` items are drawn with ``random.Random("<grid.seed>/<model>/<bench>")``
from the items the full-context (unpruned, untrained) cell answered; their images come from the benchmark file
the full-context result was scored on (``sparsectx.report.items.result_bench``), written as thumbnails into
``<name>_images/`` beside the page. Each row of the block (method / pruner / budget) shows its extracted answer,
whether it was scored correct, and the start of its response, from ``<bench>.predictions.jsonl``.
"""

from __future__ import annotations

import csv
import io
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparsectx.eval.protocol import sample_id
from sparsectx.io import atomic_write_bytes, read_json_object, read_jsonl
from sparsectx.paths import BASE, budget_tag, predictions_path, result_path
from sparsectx.report.collect import RERUN_FIX, cell_leaf, method_label, ordered_cells
from sparsectx.report.items import Benches, result_bench
from sparsectx.report.render import csv_cell
from sparsectx.workflow import Cell, Grid
from sparsectx.workflow.report_specs import ReportSpec

THUMBNAIL_PX = 256
"""Longest side of an item's image on the page."""
RESPONSE_CHARS = 240
"""Characters of each response shown (the whole response is in the leaf's predictions file)."""
CSV_COLUMNS = (
    "model",
    "benchmark",
    "item",
    "question",
    "reference",
    "method",
    "pruner",
    "budget",
    "answer",
    "correct",
    "response",
)


@dataclass(frozen=True)
class ExamplesPage:
    """The page's Markdown and CSV, and the image files written for it."""

    markdown: str
    csv: str
    images: tuple[Path, ...]


def drawn_ids(ids: list[str], count: int, seed: int, model: str, bench: str) -> list[str]:
    """Returns ``count`` of ``ids`` (all when fewer) drawn with ``random.Random(f"{seed}/{model}/{bench}")``,
    in the order drawn."""
    return random.Random(f"{seed}/{model}/{bench}").sample(ids, min(count, len(ids)))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= RESPONSE_CHARS else flat[:RESPONSE_CHARS] + " …"


def examples_page(
    grid: Grid, spec: ReportSpec, results_root: str | Path, labels: Mapping[str, str], out_dir: Path
) -> ExamplesPage:
    """Returns the examples page of ``spec``'s block after writing its thumbnails to ``<name>_images/``."""
    (block,) = [b for b in grid.blocks if b.name == spec.blocks[0]]
    images_dir = out_dir / f"{spec.name}_images"
    lines = [
        f"# {grid.experiment}: {spec.name} (examples of table `{block.name}`)",
        "",
        f"{spec.items} items per benchmark, drawn with seed {grid.seed} (grid.seed) from the items the full-context "
        "model answered; each row of the table shows its extracted answer, ✓ when scored correct, and the first "
        f"{RESPONSE_CHARS} characters of its response. Trained rows: the grid seed's checkpoint. docs/tables.md",
    ]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    written: list[Path] = []
    benches: Benches = {}
    for model in block.models:
        cells = ordered_cells(grid, block, model)
        rows = list(dict.fromkeys((c.method, c.pruner, c.budget) for c in cells))
        for bench in block.benchmarks:
            lines += ["", f"## Model {model}, benchmark {bench}"]
            reference = Cell(model, BASE, grid.reference_pruner, 1.0, bench)
            found = _reference_items(grid, reference, results_root, benches)
            if isinstance(found, str):
                lines += ["", f"No examples: {found}."]
                continue
            answers = {
                row: _predictions(grid, Cell(model, row[0], row[1], row[2], bench), results_root) for row in rows
            }
            for sid in drawn_ids(sorted(found, key=str), spec.items, grid.seed, model, bench):
                item = found[sid]
                image = _thumbnail(item.thumbnail(), images_dir / f"{model}_{bench}_{_safe(sid)}.png")
                written += [image] if image is not None else []
                lines += ["", f"### Item {sid}", ""]
                if image is not None:
                    lines += [f"![item {sid}]({images_dir.name}/{image.name})", ""]
                options = "; ".join(f"{k}. {v}" for k, v in item.options.items())
                lines += [
                    f"**Question:** {_cell(item.question)}" + (f" (options: {_cell(options)})" if options else "")
                ]
                lines += ["", f"**Reference:** {_cell(item.answer)}", ""]
                lines += ["| method | pruner | budget | answer | | response |", "|:--|:--|--:|:--|:-:|:--|"]
                for (method, pruner, budget), by_id in answers.items():
                    head = (method_label(method, labels), pruner, budget_tag(budget))
                    got = by_id.get(sid) if isinstance(by_id, dict) else None
                    if got is None:
                        why = by_id if isinstance(by_id, str) else "the item is not in its predictions"
                        lines.append(f"| {' | '.join(head)} | — | | {_cell(why)} |")
                        row = [model, bench, sid, item.question, item.answer, *head, "", "", why]
                        writer.writerow([csv_cell(v) for v in row])
                        continue
                    mark = "✓" if got["correct"] else "✗"
                    answer, response = got.get("answer") or "", _short(got.get("output") or "")
                    lines.append(f"| {' | '.join(head)} | {_cell(answer)} | {mark} | {_cell(response)} |")
                    output = got.get("output") or ""
                    row = [model, bench, sid, item.question, item.answer, *head, answer, got["correct"], output]
                    writer.writerow([csv_cell(v) for v in row])
    return ExamplesPage("\n".join(lines) + "\n", out.getvalue(), tuple(written))


def _reference_items(grid: Grid, cell: Cell, results_root: str | Path, benches: Benches) -> dict[str, Any] | str:
    """Returns sample id -> item of the full-context cell's answered items, or why there are none."""
    path = result_path(cell_leaf(results_root, grid.experiment, cell), cell.bench)
    if not path.is_file():
        return f"the full-context result {path} is missing"
    found = result_bench(read_json_object(path, RERUN_FIX), benches)
    if isinstance(found, str):
        return f"its items cannot be read: {found}"
    answered = _predictions(grid, cell, results_root)
    if isinstance(answered, str):
        return answered
    return {sample_id(item): item for item in found[1] if sample_id(item) in answered}


def _predictions(grid: Grid, cell: Cell, results_root: str | Path) -> dict[str, dict[str, Any]] | str:
    """Returns sample id -> prediction row of ``cell``, or why it has none."""
    reason = grid.reason(cell)
    if reason:
        return reason
    path = predictions_path(cell_leaf(results_root, grid.experiment, cell), cell.bench)
    if not path.is_file():
        return f"no predictions ({path.name})"
    return {str(row["id"]): row for row in read_jsonl(path)}


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def _thumbnail(image: Any, path: Path) -> Path | None:
    """Returns ``path`` after writing ``image`` (a PIL image, or None for none) shrunk to ``THUMBNAIL_PX``."""
    if image is None:
        return None
    with image:
        small = image.convert("RGB")
    small.thumbnail((THUMBNAIL_PX, THUMBNAIL_PX))
    data = io.BytesIO()
    small.save(data, format="PNG")
    atomic_write_bytes(path, data.getvalue())
    return path
