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

from sparsectx.eval.passk_mode import samples_path
from sparsectx.paths import BASE, budget_tag
from sparsectx.report.bootstrap import BootstrapConfig
from sparsectx.report.collect import (
    Entry,
    block_records,
    cell_leaf,
    method_label,
    ordered_cells,
    read_efficiency,
    read_passk,
)
from sparsectx.report.passk_pooled import POOLED, PooledCell, pooled_cells, pooled_interval, pooled_reference
from sparsectx.report.passk_spread import GAP_COLUMNS, PasskSpread, passk_spread, too_small
from sparsectx.report.plots import caption_path, plot_pass_at_k, plot_retain_vs_budget, retain_series, vector_path
from sparsectx.report.render import spread_text
from sparsectx.report.tables import MISSING, NO_RECORD, Spread, shift_of
from sparsectx.report.uncertainty import BlockSpreads
from sparsectx.workflow import Cell, Grid


@dataclass(frozen=True)
class Figure:
    """A plot the study asked for: its path once drawn, or why it was not drawn."""

    name: str
    path: Path | None
    note: str
    vector: Path | None = None
    """The plot's SVG twin, when it has one (``sparsectx.report.plots.vector_path``)."""


@dataclass(frozen=True)
class SideTable:
    """A flat table (Pass@K summary, efficiency): displayed cells, the last column being ``note``.

    ``intervals`` (one mapping per row, column -> ``Spread``) shows as the block tables show it (``value [lo, hi]
    ↑``, ``sparsectx.report.render.spread_text``) in Markdown and as ``<column> lo`` / ``<column> hi`` columns at
    the end of the CSV, with ``decimals``; ``footnote`` follows the Markdown table.
    """

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    intervals: tuple[Mapping[str, Spread], ...] = ()
    footnote: str = ""
    decimals: int = 2

    def _spread(self, index: int) -> Mapping[str, Spread]:
        return self.intervals[index] if self.intervals else {}

    def interval_columns(self) -> list[str]:
        """Returns the columns that have an interval in some row, in table order."""
        used = {c for row in self.intervals for c in row}
        return [c for c in self.columns if c in used]

    def markdown(self, title: str) -> str:
        """Returns the table as GitHub Markdown under a ``# title`` heading, then the footnote."""
        lines = [f"# {title}", "", "| " + " | ".join(self.columns) + " |"]
        lines.append("|" + "|".join(":--" if i < 4 else "--:" for i in range(len(self.columns) - 1)) + "|:--|")
        for index, row in enumerate(self.rows):
            spread = self._spread(index)
            cells = [
                cell + spread_text(spread.get(column), self.decimals)
                for cell, column in zip(row, self.columns, strict=True)
            ]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        return "\n".join([*lines, *(["", self.footnote] if self.footnote else [])]) + "\n"

    def csv(self) -> str:
        """Returns the table as CSV with a header row; interval bounds are extra columns at the end."""
        spread_columns = self.interval_columns()
        header = [*self.columns, *(f"{c} {end}" for c in spread_columns for end in ("lo", "hi"))]
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(header)
        for index, row in enumerate(self.rows):
            spread = self._spread(index)
            ends = [(c, end) for c in spread_columns for end in ("lo", "hi")]
            bounds = [f"{getattr(spread[c], end):.{self.decimals}f}" if c in spread else "" for c, end in ends]
            writer.writerow([*row, *bounds])
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
                records,
                out_dir / f"{name}.png",
                benchmarks=block.benchmarks,
                reference_method=reference,
                title=f"Retain ratio vs. budget: {block.name}, model {model}",
                notes=[f"Data: {source}."],
                intervals=found.avg_intervals if found is not None else None,
            )
            figures.append(Figure(name, path, "", vector_path(path)))
    return figures


def _fraction_curve(percent: Mapping[str, float]) -> dict[int, float]:
    return {int(k): value / 100.0 for k, value in percent.items()}


NO_IMAGE_LABEL = "no image (control)"


def curve_labels(cell: Cell, labels: Mapping[str, str]) -> dict[str, str]:
    """Returns condition -> the legend label of its curve in a pruned cell's Pass@K plot."""
    return {
        "sparse": f"{method_label(cell.method, labels)} / {cell.pruner} / {cell.budget * 100:g}%",
        "no_image": NO_IMAGE_LABEL,
    }


def passk_curves(cell: Cell, pruned: dict[str, Any], labels: Mapping[str, str]) -> dict[str, dict[int, float]]:
    """Returns label -> {k: pass@k in [0, 1]} of one pruned Pass@K cell (its JSON): its curve and the
    no-image control's."""
    names = curve_labels(cell, labels)
    present = [c for c in ("sparse", "no_image") if pruned[c] is not None]
    return {names[c]: _fraction_curve(pruned[c]["pass_at_k"]) for c in present}


def passk_plot(
    cell: Cell,
    pruned: dict[str, Any],
    full: dict[str, Any] | None,
    labels: Mapping[str, str],
    path: Path,
    data: str,
    spread: PasskSpread | None = None,
) -> Path:
    """Writes the Pass@K plot of one pruned cell and returns its path: its curves (with ``spread``'s intervals
    as error bars when given), its greedy accuracy (the same fixed context) and the full-context curve
    (``full``, the budget-1.0 cell's JSON) when measured; ``data`` (where the numbers came from) goes to the
    caption."""
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
    names = curve_labels(cell, labels)
    bars = None
    if spread is not None:
        as_fraction = lambda by_k: {k: (lo / 100, hi / 100) for k, (lo, hi) in by_k.items()}  # noqa: E731
        bars = {names[c]: as_fraction(by_k) for c, by_k in spread.curves.items()}
    return plot_pass_at_k(
        passk_curves(cell, pruned, labels),
        path,
        full_context=full_curve,
        notes=notes,
        intervals=bars,
        references={"greedy accuracy, same context": pruned["sparse"]["greedy_accuracy"] / 100.0},
        title=f"Pass@k at a fixed context: {cell.bench}, model {cell.model}",
    )


def passk_outputs(
    grid: Grid,
    root: str | Path,
    labels: Mapping[str, str],
    out_dir: Path,
    decimals: int,
    boot: BootstrapConfig,
    missing: str = NO_RECORD,
) -> tuple[SideTable, list[Figure]]:
    """Returns the Pass@K summary table (every passk cell, with bootstrap intervals over its cohort's items)
    and the figure of every pruned passk cell (its curves with the same intervals as error bars); ``missing`` is
    the note of a cell without its file."""
    (block,) = [b for b in grid.blocks if b.kind == "passk"]
    fmt = _formatter(decimals)
    columns = (
        "model",
        "benchmark",
        "method",
        "pruner",
        "budget",
        "cohort",
        "greedy (%)",
        "pass@1 (%)",
        "pass@n (%)",
        "n",
        "gap (pp)",
        "no-image pass@n (%)",
        "gap over control (pp)",
        "note",
    )
    rows, intervals, figures, undrawn = [], [], [], []
    for model in block.models:
        measured: list[tuple[Cell, dict[str, Any] | None]] = []
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
            why = reason or (missing if payload is None else "")
            if payload is not None and payload["sparse"] is None:
                why = "empty cohort: the full-context model solved no item"
            measured.append((cell, None if why else payload))
            spread = None
            if why:
                rows.append((*head, *[MISSING] * 8, why))
            else:
                spread = _cell_spread(root, grid.experiment, cell, payload, boot)
                rows.append((*head, *_passk_values(payload, fmt), ""))
                if isinstance(spread, str):
                    undrawn.append(f"{' / '.join(head)} ({spread})")
                    spread = None
            intervals.append({} if spread is None else _shown(spread))
            if cell.budget == 1.0:
                continue
            name = f"passk_{model}_{cell.bench}_{cell.method}_{cell.pruner}_{budget_tag(cell.budget)}"
            if why:
                figures.append(Figure(name, None, why))
                continue
            ref = Cell(model, BASE, grid.reference_pruner, 1.0, cell.bench)
            full = read_passk(root, grid.experiment, ref) if grid.reason(ref) is None else None
            data = f"experiment `{grid.experiment}`, passk.md"
            path = passk_plot(cell, payload, full, labels, out_dir / f"{name}.png", data, spread)
            note = "" if full is not None else f"full-context curve: {NO_RECORD}"
            figures.append(Figure(name, path, note, vector_path(path)))
        for group in pooled_cells(root, grid.experiment, measured):
            row, shown, figure = _pooled_outputs(grid, root, group, labels, out_dir, fmt, boot, undrawn)
            rows.append(row)
            intervals.append(shown)
            if figure is not None:
                figures.append(figure)
    footnote = passk_footnote(boot, undrawn, pooled=any(row[1].startswith(POOLED) for row in rows))
    return SideTable(columns, tuple(rows), tuple(intervals), footnote, decimals), figures


def _pooled_outputs(
    grid: Grid,
    root: str | Path,
    group: PooledCell,
    labels: Mapping[str, str],
    out_dir: Path,
    fmt: Callable[[float | None], str],
    boot: BootstrapConfig,
    undrawn: list[str],
) -> tuple[tuple[str, ...], dict[str, Spread], Figure | None]:
    """Returns a pooled group's table row, its intervals and (below budget 1.0) its figure; a row without an
    interval is appended to ``undrawn`` with why."""
    cell, payload = group.cell, group.payload
    head = (cell.model, cell.bench, method_label(cell.method, labels), cell.pruner, budget_tag(cell.budget))
    note = f"not pooled (no result): {', '.join(group.left_out)}" if group.left_out else ""
    spread = pooled_interval(group, boot)
    if isinstance(spread, str):
        undrawn.append(f"{' / '.join(head)} ({spread})")
        spread = None
    row = (*head, *_passk_values(payload, fmt), note)
    shown = {} if spread is None else _shown(spread)
    if cell.budget == 1.0:
        return row, shown, None
    references = {}
    for bench in group.sources:
        ref = Cell(cell.model, BASE, grid.reference_pruner, 1.0, bench)
        references[bench] = read_passk(root, grid.experiment, ref) if grid.reason(ref) is None else None
    full = pooled_reference(group, references)
    name = f"passk_{cell.model}_{POOLED}_{cell.method}_{cell.pruner}_{budget_tag(cell.budget)}"
    data = f"experiment `{grid.experiment}`, passk.md (pooled over {', '.join(group.sources)})"
    path = passk_plot(cell, payload, full, labels, out_dir / f"{name}.png", data, spread)
    note = "" if full is not None else f"full-context curve: {NO_RECORD}"
    return row, shown, Figure(name, path, note, vector_path(path))


def _cell_spread(
    root: str | Path, experiment: str, cell: Cell, payload: dict[str, Any], boot: BootstrapConfig
) -> PasskSpread | str:
    """Returns the intervals of a Pass@K cell, or why it has none (no draws file, too small a cohort)."""
    draws = samples_path(cell_leaf(root, experiment, cell), cell.bench)
    if not draws.is_file():
        return f"no per-item draws: {draws.name} is not beside the Pass@K JSON"
    return too_small(payload["cohort"]["size"], boot) or passk_spread(payload, draws, boot, cell.bench)


def _shown(spread: PasskSpread) -> dict[str, Spread]:
    """Returns a Pass@K row's intervals as the table shows them: the gaps marked when they exclude 0."""
    return {
        column: Spread(lo, hi, None, shift_of(lo, hi) if column in GAP_COLUMNS else "")
        for column, (lo, hi) in spread.columns.items()
    }


def passk_footnote(boot: BootstrapConfig, undrawn: Sequence[str], pooled: bool = False) -> str:
    """Returns the Pass@K table's note on its intervals, listing the rows that have none and why, and saying
    how ``pooled`` rows are formed when the table has any."""
    text = (
        f"Intervals: [lo, hi] is the {boot.level * 100:g}% percentile interval of a bootstrap over the cohort's "
        f"items ({boot.resamples} resamples, bootstrap.seed={boot.seed}); every column of a row is computed on "
        "the same resampled items, so the gaps are paired. ↑ / ↓: a gap whose interval lies above / below 0. "
        "Trained rows are one training seed (grid.seed). docs/tables.md"
    )
    if pooled:
        text += (
            f". Rows `{POOLED}: a+b`: those benchmarks' passk.cohort=paper_numeric cohorts as one cohort (SCOPD "
            "Fig. 1(b) / Fig. 4's pool): item-weighted means, intervals from resamples that keep each source's count"
        )
    if undrawn:
        text += f". No interval: {'; '.join(undrawn)}"
    return text


def _formatter(decimals: int) -> Callable[[float | None], str]:
    """Returns the side tables' number format; a value that rounds to zero prints as 0, never -0."""
    return lambda value: MISSING if value is None else f"{round(value, decimals) + 0.0:.{decimals}f}"


def _passk_values(payload: dict[str, Any], fmt: Callable[[float | None], str]) -> tuple[str, ...]:
    sparse, n = payload["sparse"], payload["n"]
    control = payload["no_image"]
    return (
        str(payload["cohort"]["size"]),
        fmt(sparse["greedy_accuracy"]),
        fmt(sparse["pass_at_k"]["1"]),
        fmt(sparse["pass_at_k"][str(n)]),
        str(n),
        fmt(payload["gap"]),
        fmt(None if control is None else control["pass_at_k"][str(n)]),
        fmt(payload["gap_over_control"]),
    )


EFFICIENCY_COLUMNS = (
    "model",
    "method",
    "pruner",
    "budget",
    "kept visual tokens",
    "prefill FLOPs (%)",
    "total FLOPs (%)",
    "KV cache (%)",
    "prefill latency (%)",
    "decode latency (%)",
    "total latency (%)",
    "total latency (ms)",
    "note",
)


def _efficiency_values(row: dict[str, Any], fmt: Callable[[float | None], str]) -> tuple[str, ...]:
    ratios, latency = row["ratios"], row["ratios"]["latency"]
    percent = [ratios["prefill_flops"], ratios["total_flops"], ratios["kv_cache"]]
    percent += [latency["prefill"], latency["decode"], latency["total"]]
    return (fmt(row["kept_visual"]), *(fmt(100.0 * v) for v in percent), fmt(row["latency_ms"]["total"]))


def efficiency_table(
    grid: Grid, root: str | Path, labels: Mapping[str, str], decimals: int, missing: str = NO_RECORD
) -> SideTable:
    """Returns the efficiency table: every budget of every run (1.0 included), and each missing cell (a run
    without its file noted ``missing``)."""
    fmt = _formatter(decimals)
    rows: list[tuple[str, ...]] = []
    for run in grid.efficiency_runs:
        head = (run.model, method_label(run.method, labels), run.pruner)
        payload = read_efficiency(root, grid.experiment, run)
        if payload is None:
            rows += [(*head, budget_tag(b), *[MISSING] * 8, missing) for b in sorted({1.0, *run.budgets})[::-1]]
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
        + (f", [svg]({f.vector.name})" if f.vector is not None else "")
        + (f" ({f.note})" if f.note else "")
        if f.path is not None
        else f"- {f.name}: not drawn ({f.note})"
        for f in figures
    ]
