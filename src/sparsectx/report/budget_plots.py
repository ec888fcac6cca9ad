"""The study's plots along budget and inference cost, drawn from numbers its tables already hold (no new
measurement), as ``sparsectx.report.plots`` draws (a marker per measured point, lines only between adjacent
measured budgets, the references as labelled lines, the notes in the caption, a PNG and its SVG twin).

* Recovery against budget, ``recovery_vs_budget_<block>_<model>``: for each table block whose trained rows span
  at least two pruned budgets, the ``Mean`` column of ``<block>.recovery.md`` (LT-OPD §4.6: per benchmark
  100 (trained - untrained) / (full context - untrained), the untrained model at the same pruner and budget,
  averaged over the block's benchmarks) against budget, one series per trained method / pruner.
* Retain ratio against inference cost, ``retain_vs_cost_<block>_<model>`` (LT-OPD Fig. 1 right): for each table
  block with a row the efficiency block measures, two panels, x = prefill FLOPs and KV cache as % of the
  unpruned model's (``ratios.prefill_flops`` and ``ratios.kv_cache`` of the run's ``efficiency.json``, set by
  ``sparsectx.eval.efficiency.with_ratios``), y = the average retain ratio of the same (model, method, pruner,
  budget) row of the block (its ``Avg`` column). A point the efficiency block asks for but that lacks either
  number is listed in the caption with why. (The ``flops_retain`` report entry, ``sparsectx.report.paper_figures``,
  plots total FLOPs for the blocks a preset names; these plots are drawn for every study with an efficiency
  block.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure as MplFigure

from sparsectx.paths import BASE
from sparsectx.report.analyses import Figure
from sparsectx.report.blocks import recovery_table
from sparsectx.report.collect import Entry, block_records, method_label, read_efficiency
from sparsectx.report.plots import (
    FIGSIZE,
    FLAT_STYLE,
    LEGEND_STYLE,
    PERCENT_HEADROOM,
    REFERENCE_LABEL,
    REFERENCE_STYLE,
    _new_axes,
    _save_with_vector,
    caption_markdown,
    draw_runs,
    measured_segments,
    percent_axis,
    retain_series,
    vector_path,
)
from sparsectx.report.tables import NO_RECORD, Table
from sparsectx.workflow import Block, Cell, Grid

GAP_CLOSED_LABEL = "gap closed: full context (100%)"
UNTRAINED_LABEL = "untrained, same pruner and budget (0%)"
BUDGET_AXIS_LABEL = "visual tokens kept (% of the image's tokens, log scale)"


def recovery_series(table: Table) -> tuple[dict[str, dict[float, float]], list[str]]:
    """Returns ``({"method / pruner": {budget: mean recovery %}}, points without a mean)`` of a recovery table
    (``sparsectx.report.blocks.recovery_table``); a point without a mean is "method / pruner / budget%: reason"."""
    series: dict[str, dict[float, float]] = {}
    skipped = []
    for group in table.blocks:
        for row in group.rows:
            label, mean = f"{row.method} / {row.pruner}", row.cells[-1]
            if mean.value is None:
                skipped.append(f"{label} / {group.budget * 100:g}%: {table.notes[mean.note - 1][0]}")  # type: ignore[operator]
            else:
                series.setdefault(label, {})[group.budget] = mean.value
    return series, skipped


def recovery_budget_figure(
    series: Mapping[str, Mapping[float, float]], budgets: Sequence[float], *, title: str
) -> MplFigure:
    """Returns the figure of mean recovery (%) against budget (%, log axis), one series per trained method /
    pruner, lines only between adjacent ``budgets`` (every pruned budget of the block's trained rows), with the
    gap closed (100%) dashed and the untrained model (0%) dotted."""
    fig, ax = _new_axes(title)
    for index, (label, points) in enumerate(series.items()):
        runs = measured_segments(points, budgets)
        draw_runs(ax, index, label, [[(100 * b, points[b]) for b in run] for run in runs])
    ax.axhline(100.0, label=GAP_CLOSED_LABEL, **REFERENCE_STYLE)
    ax.axhline(0.0, label=UNTRAINED_LABEL, **FLAT_STYLE)
    ax.set_xscale("log")
    ax.set_xticks([100 * b for b in sorted(budgets)], [f"{100 * b:g}" for b in sorted(budgets)])
    ax.minorticks_off()
    ax.set_xlabel(BUDGET_AXIS_LABEL)
    percent_axis(ax, [y for points in series.values() for y in points.values()], "mean compression-gap recovery (%)")
    ax.set_ylim(bottom=min(ax.get_ylim()[0], -PERCENT_HEADROOM))  # the 0% line clear of the frame
    ax.legend(**LEGEND_STYLE)
    return fig


RECOVERY_CAPTION = (
    "Compression-gap recovery against the visual-token budget (LT-OPD §4.6): each trained row's mean over the "
    "benchmarks {benchmarks} of 100 x (trained - untrained) / (full context - untrained), the untrained model at "
    "the same pruner and budget. 100% closes the gap the pruning opened (dashed), 0% recovers nothing (dotted), "
    "below 0 is worse than not training. The values are the Mean column of {block}.recovery.md (its footnotes "
    "say why a value is missing or carries a caveat). Markers are measured budgets; a line joins two adjacent "
    "budgets of the block only."
)


def recovery_plots(
    grid: Grid, entries: Mapping[Cell, Entry], labels: Mapping[str, str], out_dir: Path, decimals: int
) -> list[Figure]:
    """Returns the recovery-vs-budget figure of every table block and model whose trained rows span at least
    two pruned budgets (one budget is the ``recovery_figure`` report entry's bar chart)."""
    figures = []
    for block in (b for b in grid.blocks if b.kind == "table"):
        trained = [row for row in block.rows if any(m != BASE for m in row.methods)]
        budgets = sorted({b for row in trained for b in row.budgets if b < 1.0})
        if len(budgets) < 2:
            continue
        for model in block.models:
            name = f"recovery_vs_budget_{block.name}_{model}"
            series, skipped = recovery_series(recovery_table(grid, block, model, entries, labels, decimals))
            if not series:
                figures.append(Figure(name, None, "no trained row has a mean recovery yet"))
                continue
            title = f"Recovery vs. budget: {block.name}, model {model}"
            notes = [f"Data: experiment `{grid.experiment}`, model `{model}`, {block.name}.recovery.md."]
            notes += [f"not drawn: {point}" for point in skipped]
            description = RECOVERY_CAPTION.format(benchmarks=", ".join(block.benchmarks), block=block.name)
            fig = recovery_budget_figure(series, budgets, title=title)
            path = _save_with_vector(fig, out_dir / f"{name}.png", caption_markdown(title, description, notes))
            figures.append(Figure(name, path, "", vector_path(path)))
    return figures


COST_PANELS = (
    ("prefill_flops", "prefill FLOPs (% of the unpruned model's)"),
    ("kv_cache", "KV cache (% of the unpruned model's)"),
)
"""The cost panels: the ``ratios`` key of an ``efficiency.json`` row and the panel's x label."""


@dataclass(frozen=True)
class CostPoint:
    """One method / pruner at one budget: its costs (% of the unpruned model's, one per ``COST_PANELS``) and its
    average retain ratio (%)."""

    budget: float
    costs: tuple[float, ...]
    retain: float


@dataclass(frozen=True)
class CostSeries:
    """A block's points for one model: series label -> points, label -> the efficiency run's budgets (where
    lines break), and the points asked for but not drawn ("method / pruner / budget%: reason")."""

    points: dict[str, list[CostPoint]]
    budgets: dict[str, tuple[float, ...]]
    skipped: list[str]


def cost_series(
    grid: Grid, block: Block, model: str, entries: Mapping[Cell, Entry], labels: Mapping[str, str], root: str | Path
) -> CostSeries | None:
    """Returns the points of ``block`` for ``model`` that the efficiency block measures, each joining its
    ``efficiency.json`` row and its average retain ratio; None when the efficiency block measures no row of the
    block (the untrained model at 1.0, the reference, is no point)."""
    rows = {(m, p, b) for row in block.rows for m in row.methods for p in row.pruners for b in row.budgets}
    records = block_records(grid, block, model, entries, labels)
    retained, missing = retain_series(records, benchmarks=block.benchmarks, reference_method=method_label(BASE, labels))
    why = dict(point.split(": ", 1) for point in missing)
    found = CostSeries({}, {}, [])
    asked = False
    for run in (r for r in grid.efficiency_runs if r.model == model):
        budgets = [b for b in run.budgets if (run.method, run.pruner, b) in rows and (run.method, b) != (BASE, 1.0)]
        if not budgets:
            continue
        asked = True
        label = f"{method_label(run.method, labels)} / {run.pruner}"
        payload = read_efficiency(root, grid.experiment, run)
        measured = {} if payload is None else {row["budget"]: row for row in payload["budgets"]}
        found.budgets[label] = run.budgets
        for budget in budgets:
            where = f"{label} / {budget * 100:g}%"
            row, value = measured.get(budget), retained.get(label, {}).get(budget)
            reasons = [] if row is not None else [f"prefill FLOPs and KV cache: {NO_RECORD} (efficiency.json)"]
            reasons += [] if value is not None else [f"retain ratio: {why.get(where, NO_RECORD)}"]
            if reasons:
                found.skipped.append(f"{where}: {'; '.join(reasons)}")
                continue
            costs = tuple(100.0 * row["ratios"][key] for key, _ in COST_PANELS)
            found.points.setdefault(label, []).append(CostPoint(budget, costs, value))
    return found if asked else None


def cost_figure(found: CostSeries, *, title: str) -> MplFigure:
    """Returns the two-panel figure of average retain ratio (%) against prefill FLOPs and KV cache (% of the
    unpruned model's, linear axes), one series per method / pruner in both panels, the full context dashed."""
    if not found.points:
        raise ValueError("cost_figure got no point")
    if not title.strip():
        raise ValueError("a plot needs a title (one line saying what it shows)")
    fig = MplFigure(figsize=(2 * FIGSIZE[0], FIGSIZE[1]))
    axes = fig.subplots(1, len(COST_PANELS))
    fig.suptitle(title)
    retains = [p.retain for points in found.points.values() for p in points]
    for panel, (ax, (_, x_label)) in enumerate(zip(axes, COST_PANELS, strict=True)):
        for index, (label, points) in enumerate(found.points.items()):
            at = {p.budget: p for p in points}
            runs = measured_segments(at, found.budgets[label])
            draw_runs(ax, index, label, [[(at[b].costs[panel], at[b].retain) for b in run] for run in runs], panel)
        ax.axhline(100.0, label=REFERENCE_LABEL, **REFERENCE_STYLE)
        percent_axis(ax, [p.costs[panel] for points in found.points.values() for p in points], x_label, axis="x")
        percent_axis(ax, retains, "average retain ratio (%)" if panel == 0 else "")
    axes[-1].legend(**LEGEND_STYLE)
    return fig


COST_CAPTION = (
    "Average retain ratio against inference cost (LT-OPD Fig. 1 right). Left: prefill FLOPs; right: KV cache; "
    "each as a percentage of the unpruned model's (ratios.prefill_flops and ratios.kv_cache of the efficiency "
    "run's efficiency.json, measured on the efficiency block's items; efficiency.md says how they are counted). "
    "Each marker is one method / pruner at one budget that the efficiency block measures and table `{block}` "
    "scores; y is its average retain ratio there (the mean over the benchmarks {benchmarks} of 100 x score / the "
    "full-context {reference} score). A line joins two adjacent budgets of one efficiency run only. The dashed "
    "line is the full context (unpruned model): 100% retain ratio, at 100% of both costs."
)


def cost_plots(
    grid: Grid,
    entries: Mapping[Cell, Entry],
    labels: Mapping[str, str],
    root: str | Path,
    out_dir: Path,
    decimals: int,
) -> list[Figure]:
    """Returns the retain-vs-cost figure of every table block and model with a row the efficiency block
    measures; the caption lists every point with its numbers, then each point not drawn and why."""
    figures = []
    for block in (b for b in grid.blocks if b.kind == "table"):
        for model in block.models:
            found = cost_series(grid, block, model, entries, labels, root)
            if found is None:
                continue
            name = f"retain_vs_cost_{block.name}_{model}"
            if not found.points:
                figures.append(
                    Figure(name, None, "no measured point has both its efficiency ratios and a retain ratio yet")
                )
                continue
            title = f"Retain ratio vs. prefill FLOPs and KV cache: {block.name}, model {model}"
            notes = [f"Data: experiment `{grid.experiment}`, model `{model}`, {block.name}.md and efficiency.md."]
            notes += [
                f"{label} / {p.budget * 100:g}%: prefill FLOPs {p.costs[0]:.{decimals}f}%, KV cache "
                f"{p.costs[1]:.{decimals}f}%, retain ratio {p.retain:.{decimals}f}%"
                for label, points in found.points.items()
                for p in points
            ]
            notes += [f"not drawn: {point}" for point in found.skipped]
            description = COST_CAPTION.format(
                block=block.name, benchmarks=", ".join(block.benchmarks), reference=method_label(BASE, labels)
            )
            path = _save_with_vector(
                cost_figure(found, title=title), out_dir / f"{name}.png", caption_markdown(title, description, notes)
            )
            figures.append(Figure(name, path, "", vector_path(path)))
    return figures
