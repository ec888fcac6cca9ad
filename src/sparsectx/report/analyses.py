"""The study's figures and side tables: retain ratio against budget, Pass@K curves and the efficiency table.

* Retain plots: one per table block whose rows span at least two pruned budgets (the sweep and main tables),
  per model; the average retain ratio column of the block's table, one line per method / pruner.
* Pass@K: one plot per pruned Pass@K cell: its curve, the no-image control, its greedy accuracy (the same
  fixed context, a horizontal line) and the full-context curve (the block's budget-1.0 reference cell);
  plus a summary table.
* Every plot has its caption beside it (``<name>.caption.md``, ``sparsectx.report.plots``), which also says
  which experiment and table the data came from; the titles do not repeat it.
* Efficiency (LT-OPD Table 5 shape): per (model, method, pruner) and budget, prefill and total FLOPs, KV cache
  and latencies as percentages of the unpruned model's, from the ``efficiency.json`` of each run.

A row or curve without data stays visible: side-table rows keep a ``note`` with the reason, and a plot that
cannot be drawn is listed in the index with why.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparsectx.paths import budget_tag
from sparsectx.report.collect import (
    Entry,
    block_records,
    method_label,
    ordered_cells,
    read_efficiency,
    read_passk,
)
from sparsectx.report.plots import caption_path, plot_pass_at_k, plot_retain_vs_budget, retain_series
from sparsectx.report.tables import MISSING, NO_RECORD
from sparsectx.report.uncertainty import BlockSpreads
from sparsectx.workflow import BASE, Cell, Grid


@dataclass(frozen=True)
class Figure:
    """A plot the study asked for: its path once drawn, or why it was not drawn."""

    name: str
    path: Path | None
    note: str


@dataclass(frozen=True)
class SideTable:
    """A flat table (Pass@K summary, efficiency): displayed cells, the last column being ``note``."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def markdown(self, title: str) -> str:
        """Returns the table as GitHub Markdown under a ``# title`` heading."""
        lines = [f"# {title}", "", "| " + " | ".join(self.columns) + " |"]
        lines.append(
            "|" + "|".join(":--" if i < 4 else "--:" for i in range(len(self.columns) - 1)) + "|:--|"
        )
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in self.rows]
        return "\n".join(lines) + "\n"

    def csv(self) -> str:
        """Returns the table as CSV with a header row."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerows([self.columns, *self.rows])
        return out.getvalue()


def retain_plots(
    grid: Grid,
    entries: Mapping[Cell, Entry],
    labels: Mapping[str, str],
    out_dir: Path,
    spreads: Mapping[str, Mapping[str, BlockSpreads]] | None = None,
) -> list[Figure]:
    """Returns the retain-ratio-vs-budget figure of every multi-budget table block and model, each point with
    its interval (``spreads``: block -> model -> ``BlockSpreads``) where it has one."""
    figures = []
    reference = method_label(BASE, labels)
    for block in (b for b in grid.blocks if b.kind == "table"):
        if len({budget for row in block.rows for budget in row.budgets if budget < 1.0}) < 2:
            continue
        for model in block.models:
            name = f"retain_{block.name}_{model}"
            records = block_records(grid, block, model, entries, labels)
            series, _ = retain_series(records, benchmarks=block.benchmarks, reference_method=reference)
            if not series:
                figures.append(Figure(name, None, "no method / pruner has an average retain ratio yet"))
                continue
            source = f"experiment `{grid.experiment}`, model `{model}`, table `{block.name}` ({block.name}.md"
            source += ", whose footnotes say why a cell has no score)"
            found = (spreads or {}).get(block.name, {}).get(model)
            path = plot_retain_vs_budget(
                records, out_dir / f"{name}.png", benchmarks=block.benchmarks, reference_method=reference,
                title=f"Retain ratio vs. budget: {block.name}, model {model}", notes=[f"Data: {source}."],
                intervals=found.avg_intervals if found is not None else None,
            )  # fmt: skip
            figures.append(Figure(name, path, ""))
    return figures


def _fraction_curve(percent: Mapping[str, float]) -> dict[int, float]:
    return {int(k): value / 100.0 for k, value in percent.items()}


def passk_curves(
    cell: Cell, pruned: dict[str, Any], labels: Mapping[str, str]
) -> dict[str, dict[int, float]]:
    """Returns label -> {k: pass@k in [0, 1]} of one pruned Pass@K cell (its JSON): its curve and the
    no-image control's."""
    label = f"{method_label(cell.method, labels)} / {cell.pruner} / {cell.budget * 100:g}%"
    curves = {label: _fraction_curve(pruned["sparse"]["pass_at_k"])}
    if pruned["no_image"] is not None:
        curves["no image (control)"] = _fraction_curve(pruned["no_image"]["pass_at_k"])
    return curves


def passk_plot(
    cell: Cell,
    pruned: dict[str, Any],
    full: dict[str, Any] | None,
    labels: Mapping[str, str],
    path: Path,
    data: str,
) -> Path:
    """Writes the Pass@K plot of one pruned cell and returns its path: its curves, its greedy accuracy (the
    same fixed context) and the full-context curve (``full``, the budget-1.0 cell's JSON) when measured;
    ``data`` (where the numbers came from) goes to the caption."""
    full_sparse = None if full is None else full["sparse"]
    full_curve = None if full_sparse is None else _fraction_curve(full_sparse["pass_at_k"])
    notes = [
        f"Data: {data}.",
        f"Cohort: the {pruned['cohort']['size']} items the full-context model solved; "
        f"n = {pruned['n']} samples per item.",
    ]
    if full_curve is None:
        why = NO_RECORD if full is None else "its cohort is empty (the full-context model solved no item)"
        notes.append(f"full-context curve not drawn: {why}")
    return plot_pass_at_k(
        passk_curves(cell, pruned, labels), path, full_context=full_curve, notes=notes,
        references={"greedy accuracy, same context": pruned["sparse"]["greedy_accuracy"] / 100.0},
        title=f"Pass@k at a fixed context: {cell.bench}, model {cell.model}",
    )  # fmt: skip


def passk_outputs(
    grid: Grid, root: str | Path, labels: Mapping[str, str], out_dir: Path, decimals: int
) -> tuple[SideTable, list[Figure]]:
    """Returns the Pass@K summary table (every passk cell) and the figure of every pruned passk cell."""
    (block,) = [b for b in grid.blocks if b.kind == "passk"]
    fmt = _formatter(decimals)
    columns = ("model", "benchmark", "method", "pruner", "budget", "cohort", "greedy (%)", "pass@1 (%)",
               "pass@n (%)", "n", "gap (pp)", "no-image pass@n (%)", "gap over control (pp)", "note")  # fmt: skip
    rows, figures = [], []
    for model in block.models:
        for cell in ordered_cells(grid, block, model):
            head = (
                model,
                cell.bench,
                method_label(cell.method, labels),
                cell.pruner,
                budget_tag(cell.budget),
            )
            reason = grid.reason(cell)
            payload = None if reason else read_passk(root, grid.experiment, cell)
            why = reason or (NO_RECORD if payload is None else "")
            if payload is not None and payload["sparse"] is None:
                why = "empty cohort: the full-context model solved no item"
            if why:
                rows.append((*head, *[MISSING] * 8, why))
            else:
                rows.append((*head, *_passk_values(payload, fmt), ""))
            if cell.budget == 1.0:
                continue
            name = f"passk_{model}_{cell.bench}_{cell.method}_{cell.pruner}_{budget_tag(cell.budget)}"
            if why:
                figures.append(Figure(name, None, why))
                continue
            ref = Cell(model, BASE, grid.reference_pruner, 1.0, cell.bench)
            full = read_passk(root, grid.experiment, ref) if grid.reason(ref) is None else None
            data = f"experiment `{grid.experiment}`, passk.md"
            path = passk_plot(cell, payload, full, labels, out_dir / f"{name}.png", data)
            figures.append(Figure(name, path, "" if full is not None else f"full-context curve: {NO_RECORD}"))
    return SideTable(columns, tuple(rows)), figures


def _formatter(decimals: int) -> Callable[[float | None], str]:
    return lambda value: MISSING if value is None else f"{value:.{decimals}f}"


def _passk_values(payload: dict[str, Any], fmt: Callable[[float | None], str]) -> tuple[str, ...]:
    sparse, n = payload["sparse"], payload["n"]
    control = payload["no_image"]
    return (
        str(payload["cohort"]["size"]), fmt(sparse["greedy_accuracy"]), fmt(sparse["pass_at_k"]["1"]),
        fmt(sparse["pass_at_k"][str(n)]), str(n), fmt(payload["gap"]),
        fmt(None if control is None else control["pass_at_k"][str(n)]), fmt(payload["gap_over_control"]),
    )  # fmt: skip


EFFICIENCY_COLUMNS = (
    "model", "method", "pruner", "budget", "kept visual tokens", "prefill FLOPs (%)", "total FLOPs (%)",
    "KV cache (%)", "prefill latency (%)", "decode latency (%)", "total latency (%)", "total latency (ms)", "note",
)  # fmt: skip


def _efficiency_values(row: dict[str, Any], fmt: Callable[[float | None], str]) -> tuple[str, ...]:
    ratios, latency = row["ratios"], row["ratios"]["latency"]
    percent = [ratios["prefill_flops"], ratios["total_flops"], ratios["kv_cache"]]
    percent += [latency["prefill"], latency["decode"], latency["total"]]
    return (fmt(row["kept_visual"]), *(fmt(100.0 * v) for v in percent), fmt(row["latency_ms"]["total"]))


def efficiency_table(grid: Grid, root: str | Path, labels: Mapping[str, str], decimals: int) -> SideTable:
    """Returns the efficiency table: every budget of every run (1.0 included), and each missing cell."""
    fmt = _formatter(decimals)
    rows: list[tuple[str, ...]] = []
    for run in grid.efficiency_runs:
        head = (run.model, method_label(run.method, labels), run.pruner)
        payload = read_efficiency(root, grid.experiment, run)
        if payload is None:
            rows += [
                (*head, budget_tag(b), *[MISSING] * 8, NO_RECORD) for b in sorted({1.0, *run.budgets})[::-1]
            ]
            continue
        for row in payload["budgets"]:
            rows.append((*head, budget_tag(row["budget"]), *_efficiency_values(row, fmt), ""))
    for missing in (m for m in grid.missing_cells() if m.block == "efficiency"):
        cell = missing.cell
        head = (cell.model, method_label(cell.method, labels), cell.pruner, budget_tag(cell.budget))
        rows.append((*head, *[MISSING] * 8, missing.reason))
    return SideTable(EFFICIENCY_COLUMNS, tuple(rows))


def has_block(grid: Grid, kind: str) -> bool:
    """Returns whether the grid declares a block of ``kind`` (``passk`` or ``efficiency``)."""
    return any(b.kind == kind for b in grid.blocks)


def figure_notes(figures: Sequence[Figure]) -> list[str]:
    """Returns one index line per figure: a link when drawn, the reason when not."""
    return [
        f"- [{f.name}.png]({f.name}.png), [caption]({caption_path(f.path).name})"
        + (f" ({f.note})" if f.note else "")
        if f.path is not None
        else f"- {f.name}: not drawn ({f.note})"
        for f in figures
    ]  # fmt: skip
