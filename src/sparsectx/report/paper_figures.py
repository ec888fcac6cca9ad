"""LT-OPD's figures drawn from numbers the study's tables already hold.

* ``flops_retain`` (LT-OPD Fig. 1 right): each efficiency run's budget as a point, x = its total FLOPs as a
  fraction of the unpruned model's (``efficiency.json``), y = the average retain ratio of the same (model,
  method, pruner, budget) row in the first listed table block that has it; with the table of those points.
* ``recovery_figure`` (LT-OPD Fig. 4): the block's recovery table (``<block>.recovery.md``) as grouped bars,
  one group per benchmark (and the mean), one bar per trained row.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure as MplFigure

from sparsectx.paths import BASE, budget_tag
from sparsectx.report.analyses import Figure, SideTable
from sparsectx.report.blocks import recovery_table
from sparsectx.report.collect import Entry, block_records, method_label, read_efficiency
from sparsectx.report.plots import LEGEND_STYLE, MARKERS, _save_with_vector, caption_markdown, retain_series
from sparsectx.report.tables import MISSING, NO_RECORD, Table
from sparsectx.workflow import Cell, Grid
from sparsectx.workflow.report_specs import ReportSpec

FLOPS_COLUMNS = (
    "model",
    "method",
    "pruner",
    "budget",
    "total FLOPs (x unpruned)",
    "prefill FLOPs (x unpruned)",
    "avg retain ratio (%)",
    "retain ratio from",
    "note",
)


def retain_ratios(
    grid: Grid, spec: ReportSpec, entries: Mapping[Cell, Entry], labels: Mapping[str, str]
) -> dict[tuple[str, str, str, float], tuple[float, str]]:
    """Returns (model, method label, pruner, budget) -> (average retain ratio %, block) over ``spec.blocks``,
    the first block listing a row giving its ratio."""
    found: dict[tuple[str, str, str, float], tuple[float, str]] = {}
    reference = method_label(BASE, labels)
    for name in spec.blocks:
        (block,) = [b for b in grid.blocks if b.name == name]
        for model in block.models:
            records = block_records(grid, block, model, entries, labels)
            series, _ = retain_series(records, benchmarks=block.benchmarks, reference_method=reference)
            for label, by_budget in series.items():
                method, pruner = label.rsplit(" / ", 1)
                for budget, value in by_budget.items():
                    found.setdefault((model, method, pruner, budget), (value, name))
    return found


def flops_retain_outputs(
    grid: Grid,
    spec: ReportSpec,
    entries: Mapping[Cell, Entry],
    results_root: str | Path,
    labels: Mapping[str, str],
    out_dir: Path,
    decimals: int,
) -> tuple[SideTable, list[Figure]]:
    """Returns the table of every pruned efficiency point (FLOPs ratio, retain ratio) and one scatter plot per
    model of the points that have both."""
    ratios = retain_ratios(grid, spec, entries, labels)
    rows: list[tuple[str, ...]] = []
    points: dict[str, dict[str, list[tuple[float, float, float]]]] = {}
    for run in grid.efficiency_runs:
        label = method_label(run.method, labels)
        payload = read_efficiency(results_root, grid.experiment, run)
        budgets = sorted(run.budgets, reverse=True)
        measured = {} if payload is None else {row["budget"]: row for row in payload["budgets"]}
        for budget in budgets:
            head = (run.model, label, run.pruner, budget_tag(budget))
            row, retain = measured.get(budget), ratios.get((run.model, label, run.pruner, budget))
            flops = "" if row is None else f"{row['ratios']['total_flops']:.3f}"
            prefill = "" if row is None else f"{row['ratios']['prefill_flops']:.3f}"
            shown = "" if retain is None else f"{retain[0]:.{decimals}f}"
            why = []
            if row is None:
                why.append(f"FLOPs: {NO_RECORD} (efficiency.json)")
            if retain is None:
                why.append(f"retain ratio: no score in the blocks {list(spec.blocks)}")
            rows.append(
                (
                    *head,
                    flops or MISSING,
                    prefill or MISSING,
                    shown or MISSING,
                    "" if retain is None else retain[1],
                    "; ".join(why),
                )
            )
            if row is not None and retain is not None:
                series = points.setdefault(run.model, {}).setdefault(f"{label} / {run.pruner}", [])
                series.append((row["ratios"]["total_flops"], retain[0], budget))
    figures = [_flops_plot(grid, spec, model, series, out_dir) for model, series in points.items()]
    footnote = (
        "Total FLOPs (prefill and decoding) and prefill FLOPs as a fraction of the unpruned model's, from each "
        "efficiency run (efficiency.md says how they are counted); average retain ratio: the score tables' "
        f"{' / '.join(spec.blocks)} average over benchmarks of score / the unpruned model's (%). docs/tables.md"
    )
    return SideTable(FLOPS_COLUMNS, tuple(rows), footnote=footnote, decimals=decimals), figures


FLOPS_CAPTION = (
    "Accuracy against inference cost (LT-OPD Fig. 1 right): each marker is one method / pruner at one budget "
    "(labelled), x = its total FLOPs as a fraction of the unpruned model's (efficiency.json of its efficiency "
    "run), y = its average retain ratio in the score table ({blocks}). Points of one method / pruner are "
    "joined in budget order. The dashed line is the unpruned model (1.0x FLOPs, 100%)."
)


def _flops_plot(
    grid: Grid, spec: ReportSpec, model: str, series: Mapping[str, list[tuple[float, float, float]]], out_dir: Path
) -> Figure:
    name = f"{spec.name}_{model}"
    title = f"Retain ratio vs. FLOPs, model {model}"
    fig = MplFigure(figsize=(6.0, 4.0))
    ax = fig.add_subplot()
    ax.set_title(title)
    tops = [100.0]
    for number, (label, found) in enumerate(series.items()):
        found = sorted(found)
        xs, ys = [f for f, _, _ in found], [r for _, r, _ in found]
        ax.plot(xs, ys, marker=MARKERS[number % len(MARKERS)], label=label)
        for x, y, budget in found:
            ax.annotate(f"{budget * 100:g}%", (x, y), textcoords="offset points", xytext=(4, 4), fontsize="small")
        tops += ys
    ax.axhline(100.0, color="black", linestyle="--", linewidth=1.0, label="unpruned")
    ax.set_xlabel("total FLOPs (fraction of the unpruned model)")
    ax.set_ylabel("average retain ratio (%)")
    ax.set_xlim(left=0.0)
    ax.set_ylim(0.0, 20.0 * np.ceil(max(tops) / 20.0) + 4.0)
    ax.legend(**LEGEND_STYLE)
    notes = [f"Data: experiment `{grid.experiment}`, {spec.name}.md (rows without both numbers are not drawn)."]
    caption = caption_markdown(title, FLOPS_CAPTION.format(blocks=", ".join(spec.blocks)), notes)
    path = _save_with_vector(fig, out_dir / f"{name}.png", caption)
    return Figure(name, path, "", path.with_suffix(".svg"))


RECOVERY_CAPTION = (
    "Compression-gap recovery (LT-OPD Fig. 4): per benchmark of table `{block}`, and their mean, each trained "
    "row's 100 x (trained - untrained) / (full context - untrained), the untrained model at the same pruner and "
    "budget; 100% closes the gap, 0% recovers nothing, below 0 is worse than not training. The numbers are "
    "{block}.recovery.md's (its footnotes say why a bar is missing)."
)


def recovery_bars(table: Table) -> dict[str, list[float | None]]:
    """Returns "method / pruner / budget%" -> its recovery per column of the recovery ``table`` (None: none)."""
    return {
        f"{row.method} / {row.pruner} / {group.budget * 100:g}%": [c.value for c in row.cells]
        for group in table.blocks
        for row in group.rows
    }


def recovery_figures(
    grid: Grid,
    spec: ReportSpec,
    entries: Mapping[Cell, Entry],
    labels: Mapping[str, str],
    out_dir: Path,
    decimals: int,
) -> list[Figure]:
    """Returns one grouped bar chart per model of ``spec``'s block: its recovery table's values."""
    (block,) = [b for b in grid.blocks if b.name == spec.blocks[0]]
    figures = []
    for model in block.models:
        table = recovery_table(grid, block, model, entries, labels, decimals)
        name = f"{spec.name}_{model}"
        bars = recovery_bars(table)
        missing = [
            f"{label}: {column}"
            for label, values in bars.items()
            for column, v in zip(table.columns, values, strict=True)
            if v is None
        ]
        if all(v is None for values in bars.values() for v in values):
            figures.append(Figure(name, None, "no trained row has a recovery yet"))
            continue
        title = f"Compression-gap recovery: {block.name}, model {model}"
        fig = MplFigure(figsize=(max(6.0, 1.2 * len(table.columns) + 2.0), 4.0))
        ax = fig.add_subplot()
        ax.set_title(title)
        width = 0.8 / max(len(bars), 1)
        x = np.arange(len(table.columns))
        for number, (label, values) in enumerate(bars.items()):
            shown = [np.nan if v is None else v for v in values]
            ax.bar(x + (number - (len(bars) - 1) / 2) * width, shown, width, label=label)
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.axhline(100.0, color="black", linestyle="--", linewidth=1.0, label="gap closed (100%)")
        ax.set_xticks(x, list(table.columns))
        ax.set_ylabel("recovery (%)")
        ax.legend(**LEGEND_STYLE)
        notes = [f"Data: experiment `{grid.experiment}`, {block.name}.recovery.md."]
        notes += [f"No bar ({MISSING}): {'; '.join(missing)}."] if missing else []
        caption = caption_markdown(title, RECOVERY_CAPTION.format(block=block.name), notes)
        path = _save_with_vector(fig, out_dir / f"{name}.png", caption)
        figures.append(Figure(name, path, "", path.with_suffix(".svg")))
    return figures
