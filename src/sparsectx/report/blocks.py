"""One paper table per grid block: the score table and, where the block has trained methods, a recovery table.

A block may name several models; its files then hold one table per model (a Markdown section, a LaTeX
``tabular`` and a ``model`` column in the CSV), so one block is always ``<block>.md|.tex|.csv``.

Recovery (LT-OPD §4.6, ``sparsectx.eval.aggregate.recovery``): for each trained cell, the share of the gap
between the untrained model under the same pruner and budget and the full-context model that training closes.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sparsectx.eval.aggregate import recovery
from sparsectx.paths import BASE
from sparsectx.report.collect import Entry, block_records, method_label, ordered_cells, score_of
from sparsectx.report.render import tex_escape, to_csv, to_latex, to_markdown
from sparsectx.report.tables import (
    AVERAGE_CAVEAT,
    MISSING,
    Block,
    Cell,
    Row,
    Table,
    build_table,
)
from sparsectx.report.uncertainty import BlockSpreads
from sparsectx.workflow import Block as GridBlock
from sparsectx.workflow import Cell as GridCell
from sparsectx.workflow import Grid

MEAN_LABEL = "Mean"
"""Heading of the recovery table's mean column."""


@dataclass(frozen=True)
class Rendered:
    """The three renderings of one block's tables (one table per model)."""

    markdown: str
    latex: str
    csv: str
    missing: dict[str, int]
    """Reason -> number of cells without a value (footnoted in every rendering)."""


def score_tables(
    grid: Grid,
    block: GridBlock,
    entries: Mapping[GridCell, Entry],
    labels: Mapping[str, str],
    avg_label: str,
    decimals: int,
    spreads: Mapping[str, BlockSpreads] | None = None,
    remark: str = "",
) -> dict[str, Table]:
    """Returns model -> the score table of ``block`` (rows by budget, Vanilla first, average retain ratio),
    with each model's intervals (``spreads``) and ``remark`` plus the cells without one under it."""
    methods = list(dict.fromkeys([BASE, *(m for row in block.rows for m in row.methods)]))
    spreads = spreads or {}
    return {
        model: build_table(
            block_records(grid, block, model, entries, labels),
            benchmarks=list(block.benchmarks),
            methods=[method_label(m, labels) for m in methods],
            reference_method=method_label(BASE, labels),
            avg_label=avg_label,
            decimals=decimals,
            spreads=spreads[model].spreads if model in spreads else None,
            remarks=interval_remarks(remark, spreads.get(model)),
        )
        for model in block.models
    }


def interval_remarks(remark: str, spreads: BlockSpreads | None) -> tuple[str, ...]:
    """Returns the notes under a table: how its intervals were made, then each reason a scored cell has none."""
    if not remark:
        return ()
    missing = spreads.unavailable if spreads is not None else {}
    return (remark, *(f"No interval ({why}): {'; '.join(where)}." for why, where in missing.items()))


DELTA_MISSING = (
    "no paired difference: this row or the untrained row at its pruner and budget has no score or no interval "
    "here (the score table says why)"
)


def delta_table(
    grid: Grid,
    block: GridBlock,
    model: str,
    spreads: BlockSpreads,
    labels: Mapping[str, str],
    remark: str,
    avg_label: str,
    decimals: int,
) -> Table:
    """Returns the differences of ``block``'s trained rows to the untrained row at the same pruner and budget,
    each with its paired interval and an arrow where that interval excludes 0."""
    trained = [c for c in ordered_cells(grid, block, model) if c.method != BASE]
    rows = list(dict.fromkeys((c.method, c.pruner, c.budget) for c in trained))
    columns = (*block.benchmarks, avg_label)
    notes: list[str] = []
    shown: dict[float, list[Row]] = {}
    for method, pruner, budget in rows:
        label = method_label(method, labels)
        cells = []
        for column in columns:
            found = spreads.deltas.get((label, pruner, budget, column))
            if found is None:
                notes.append(f"{label} / {pruner} / {budget * 100:g}%: {column}")
                cells.append(Cell(None, MISSING, "", 1))
            else:
                cells.append(Cell(found[0], f"{found[0]:+.{decimals}f}", "", None, found[1]))
        shown.setdefault(budget, []).append(Row(label, pruner, tuple(cells)))
    blocks = tuple(Block(b, tuple(shown[b])) for b in sorted(shown, reverse=True))
    return Table(
        columns, blocks, ((DELTA_MISSING, tuple(notes)),) if notes else (), remarks=(remark,), decimals=decimals
    )


def has_trained(block: GridBlock) -> bool:
    """Returns whether ``block`` lists a trained method below budget 1.0 (so it gets a recovery table)."""
    return any(m != BASE and b < 1.0 for row in block.rows for m in row.methods for b in row.budgets)


def _caveat(entries: Mapping[GridCell, Entry], cells: Sequence[GridCell]) -> str:
    """Returns the caveats (``ResultRecord.caveat``) of the scores of ``cells`` joined, "" when none has one."""
    found = [entry["caveat"] for c in cells if isinstance(entry := entries.get(c), dict) and entry.get("caveat")]
    return "; ".join(dict.fromkeys(found))


def _recovery_cell(
    grid: Grid, entries: Mapping[GridCell, Entry], cell: GridCell
) -> tuple[float | None, str, tuple[float, float, float] | None]:
    """Returns (recovery %, caveat or "", the three scores) of one trained cell, or (None, reason, None)."""
    trio = {
        "trained": cell,
        "untrained at this pruner and budget": GridCell(cell.model, BASE, cell.pruner, cell.budget, cell.bench),
        "full context": GridCell(cell.model, BASE, grid.reference_pruner, 1.0, cell.bench),
    }
    scores = []
    for role, point in trio.items():
        value, why = score_of(entries, point)
        if value is None:
            return None, why if role == "trained" else f"{role} model: {why}", None
        scores.append(value)
    method, pruned, full = scores
    try:
        value = recovery({cell.bench: method}, {cell.bench: pruned}, {cell.bench: full}).mean
    except ValueError as err:
        return None, str(err), None
    return value, _caveat(entries, list(trio.values())), (method, pruned, full)


def recovery_table(
    grid: Grid,
    block: GridBlock,
    model: str,
    entries: Mapping[GridCell, Entry],
    labels: Mapping[str, str],
    decimals: int,
) -> Table:
    """Returns the recovery table of ``block``'s trained rows for ``model``: benchmarks, then their mean.

    Rows at budget 1.0 are left out: there the untrained model is the full-context one, so the gap is zero.
    """
    trained = [c for c in ordered_cells(grid, block, model) if c.method != BASE and c.budget < 1.0]
    rows = list(dict.fromkeys((c.method, c.pruner, c.budget) for c in trained))
    notes: dict[str, list[str]] = {}
    caveats: set[str] = set()

    def cell(value: float | None, why: str, where: str) -> Cell:
        """``why``: the reason a missing value has none, or the caveat of a value (footnoted when given)."""
        if value is not None and not why:
            return Cell(value, f"{value:.{decimals}f}")
        notes.setdefault(why, []).append(where)
        if value is None:
            return Cell(None, MISSING, "", list(notes).index(why) + 1)
        caveats.add(why)
        return Cell(value, f"{value:.{decimals}f}", "", list(notes).index(why) + 1)

    shown: dict[float, list[Row]] = {}
    for method, pruner, budget in rows:
        name = f"{method_label(method, labels)} / {pruner} / {budget * 100:g}%"
        cells, triples = [], []
        for bench in block.benchmarks:
            value, why, scores = _recovery_cell(grid, entries, GridCell(model, method, pruner, budget, bench))
            cells.append(cell(value, why, f"{name}: {bench}"))
            triples.append(scores)
        if all(t is not None for t in triples):
            per = [dict(zip(block.benchmarks, column, strict=True)) for column in zip(*triples, strict=True)]
            mean = recovery(*per).mean
            why = AVERAGE_CAVEAT if any(c.note is not None for c in cells) else ""
        else:
            mean, why = None, "the mean needs a recovery on every benchmark"
        cells.append(cell(mean, why, f"{name}: {MEAN_LABEL}"))
        shown.setdefault(budget, []).append(Row(method_label(method, labels), pruner, tuple(cells)))
    blocks = tuple(Block(b, tuple(shown[b])) for b in sorted(shown, reverse=True))
    notes_out = tuple((why, tuple(where)) for why, where in notes.items())
    noted = frozenset(i for i, why in enumerate(notes, start=1) if why in caveats)
    return Table((*block.benchmarks, MEAN_LABEL), blocks, notes_out, noted)


def _missing_counts(tables: Sequence[Table]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for table in tables:
        for number, (reason, where) in enumerate(table.notes, start=1):
            if number not in table.caveats:  # a caveat marks a shown value, not a missing one
                counts[reason] = counts.get(reason, 0) + len(where)
    return counts


def render(title: str, tables: Mapping[str, Table]) -> Rendered:
    """Returns the Markdown, LaTeX and CSV of one block's per-model tables (CSV gets a ``model`` column)."""
    md = [f"# {title}", ""]
    tex = [f"% {title}"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for i, (model, table) in enumerate(tables.items()):
        md += [f"## Model: {model}", "", to_markdown(table)]
        tex += [f"% model: {model}", f"\\paragraph{{{tex_escape(model)}}}", to_latex(table)]
        header, *rows = csv.reader(io.StringIO(to_csv(table)))
        if i == 0:
            writer.writerow(["model", *header])
        writer.writerows([model, *row] for row in rows)
    return Rendered("\n".join(md), "\n".join(tex), out.getvalue(), _missing_counts(list(tables.values())))
