"""A hyperparameter sweep's table and plot (SCOPD Fig. 3): each point one trained run, scored by its normalised mean.

A point's value is SCOPD's Avg₁₃ over the sweep's benchmarks: ``mean_b 100 x score_b / reference_b``, the
reference being the sweep's ``reference`` method at budget 1.0 under the grid's reference pruner (``base``: the
unpruned untrained model, as in SCOPD Tables 1 and 6). Its interval is the percentile interval of the same mean
recomputed on every paired bootstrap resample (``sparsectx.report.uncertainty.cell_replicates``, whose draws
depend on the benchmark only, so they are the block table's), and a point pooled over training seeds shows
± the standard deviation over seeds of its normalised mean. The untrained model at the sweep's pruner and budget
is scored the same way: a remark under the table and a dotted line in the plot. A point without a value keeps
its row ("—" and a footnote naming why) and is listed in the plot's caption.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sparsectx.eval.aggregate import retain_ratio
from sparsectx.paths import BASE
from sparsectx.report.analyses import Figure
from sparsectx.report.bootstrap import BootstrapConfig, interval
from sparsectx.report.collect import Entry, method_label, score_of
from sparsectx.report.plots import REFERENCE_LABEL, plot_sweep, vector_path
from sparsectx.report.render import spread_text
from sparsectx.report.tables import MISSING, Block, Cell, Row, Spread, Table
from sparsectx.report.uncertainty import Replicates, cell_replicates
from sparsectx.workflow import Cell as GridCell
from sparsectx.workflow import Grid, Sweep


@dataclass(frozen=True)
class Point:
    """One row of a sweep for one model: the normalised mean of ``method``, or why it has none."""

    method: str
    value: float | None
    """The normalised mean (%), None when some score is missing (``why``)."""
    why: str
    spread: Spread | None


def sweep_cells(grid: Grid, sweep: Sweep, model: str, method: str) -> list[GridCell]:
    """Returns the cells of ``method`` at the sweep's pruner and budget, one per benchmark."""
    return [GridCell(model, method, sweep.pruner, sweep.budget, b) for b in sweep.benchmarks]


def reference_cells(grid: Grid, sweep: Sweep, model: str) -> list[GridCell]:
    """Returns the normalisation reference's cells: ``sweep.reference`` at budget 1.0 under the reference pruner."""
    return [GridCell(model, sweep.reference, grid.reference_pruner, 1.0, b) for b in sweep.benchmarks]


def _seed_std(entries: Mapping[GridCell, Entry], cells: Sequence[GridCell], full: Sequence[float]) -> float | None:
    """Returns the standard deviation over training seeds of a pooled row's normalised mean (None for one seed)."""
    seeds = [e.get("seed_scores") if isinstance(e := entries[c], dict) else None for c in cells]
    if any(s is None or len(s) < 2 for s in seeds):
        return None
    per_seed = np.mean([100.0 * np.asarray(s) / f for s, f in zip(seeds, full, strict=True)], axis=0)
    return statistics.stdev(per_seed.tolist())


def _interval(
    reps: Replicates, cells: Sequence[GridCell], refs: Sequence[GridCell], level: float
) -> tuple[tuple[float, float] | None, str]:
    """Returns the interval of the normalised mean from the cells' replicates, or (None, why it has none)."""
    found = [reps.get(c) for c in (*cells, *refs)]
    why = next((f for f in found if isinstance(f, str)), None)
    if why is not None or any(f is None for f in found):
        return None, why or "a cell has no per-item records"
    mine, full = found[: len(cells)], found[len(cells) :]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.mean([100.0 * m / f for m, f in zip(mine, full, strict=True)], axis=0)  # type: ignore[operator]
    if not np.all(np.isfinite(ratios)):
        return None, "the reference score is 0 on some resample, so the normalised mean is undefined there"
    return interval(ratios, level), ""


def sweep_point(
    grid: Grid,
    sweep: Sweep,
    model: str,
    method: str,
    entries: Mapping[GridCell, Entry],
    reps: Replicates | None,
    level: float,
) -> Point:
    """Returns ``method``'s normalised mean at the sweep's pruner and budget, with its spread when ``reps`` has it."""
    cells, refs = sweep_cells(grid, sweep, model, method), reference_cells(grid, sweep, model)
    scores, full = {}, {}
    for cell, ref in zip(cells, refs, strict=True):
        value, why = score_of(entries, cell)
        if value is None:
            return Point(method, None, f"{cell.bench}: {why}", None)
        ref_value, ref_why = score_of(entries, ref)
        if ref_value is None:
            return Point(method, None, f"reference {sweep.reference} at 100% on {ref.bench}: {ref_why}", None)
        scores[cell.bench], full[cell.bench] = value, ref_value
    try:
        mean = retain_ratio(scores, full)
    except ValueError as err:
        return Point(method, None, str(err), None)
    if reps is None:
        return Point(method, mean, "", None)
    bounds, why = _interval(reps, cells, refs, level)
    if bounds is None:
        return Point(method, mean, f"no interval: {why}", None)
    return Point(method, mean, "", Spread(*bounds, _seed_std(entries, cells, list(full.values()))))


def sweep_table(
    sweep: Sweep, points: Sequence[Point], labels: Mapping[str, str], avg_label: str, decimals: int, remark: str
) -> Table:
    """Returns the sweep's table for one model: one row per point (method, pruner, the parameter's value, the
    normalised mean with its interval), a footnote per point without a value, and ``remark`` under it."""
    notes: dict[str, list[str]] = {}
    rows = []
    for point, value in zip(points, (p.value for p in sweep.points), strict=True):
        shown = Cell(value, sweep.shown(value))
        label = method_label(point.method, labels)
        if point.value is None:
            notes.setdefault(point.why, []).append(f"{label} ({sweep.shown(value)})")
            mean = Cell(None, MISSING, "", list(notes).index(point.why) + 1)
        else:
            mean = Cell(point.value, f"{point.value:.{decimals}f}", "", None, point.spread)
        rows.append(Row(label, sweep.pruner, (shown, mean)))
    blocks = (Block(sweep.budget, tuple(rows)),)
    notes_out = tuple((why, tuple(where)) for why, where in notes.items())
    return Table((sweep.label, avg_label), blocks, notes_out, remarks=(remark,), decimals=decimals)


def _baseline_text(point: Point, label: str, decimals: int) -> str:
    if point.value is None:
        return f"{label}: {MISSING} ({point.why})"
    return f"{label}: {point.value:.{decimals}f}{spread_text(point.spread, decimals)}"


def sweep_outputs(
    grid: Grid,
    sweep: Sweep,
    entries: Mapping[GridCell, Entry],
    labels: Mapping[str, str],
    out_dir: Path,
    results_root: str | Path,
    boot: BootstrapConfig | None,
    avg_label: str,
    decimals: int,
) -> tuple[dict[str, Table], list[Figure]]:
    """Returns model -> the sweep's table, and its plots (``sweep_<name>_<model>.png|.svg``).

    ``boot`` None (scores not from the project's scorers) gives no intervals.
    """
    cells = [
        c
        for model in sweep.models
        for method in (BASE, *(p.method for p in sweep.points))
        for c in (*sweep_cells(grid, sweep, model, method), *reference_cells(grid, sweep, model))
    ]
    reps = None
    if boot is not None:  # the draws depend on the benchmark alone: these are the block table's replicates
        reps = cell_replicates(grid, results_root, {c: entries[c] for c in dict.fromkeys(cells)}, boot)
    level = boot.level if boot is not None else 0.0
    where = f"{labels.get(BASE, BASE)} / {sweep.pruner} / {sweep.budget * 100:g}%"
    reference = f"{method_label(sweep.reference, labels)} at 100% visual tokens"
    tables, figures = {}, []
    for model in sweep.models:
        points = [sweep_point(grid, sweep, model, p.method, entries, reps, level) for p in sweep.points]
        untrained = sweep_point(grid, sweep, model, BASE, entries, reps, level)
        remark = (
            f"{avg_label}: mean over {', '.join(sweep.benchmarks)} of 100 x score / the score of {reference}; "
            f"one trained run per point. Untrained {_baseline_text(untrained, where, decimals)}."
        )
        if reps is not None:
            remark += (
                f" [lo, hi]: {level * 100:g}% paired bootstrap interval over items (and training seeds, ± their "
                "standard deviation), as in the block table. docs/tables.md"
            )
        tables[model] = sweep_table(sweep, points, labels, avg_label, decimals, remark)
        legend = REFERENCE_LABEL if sweep.reference == BASE else reference
        figures.append(_sweep_plot(grid, sweep, model, points, untrained, where, legend, out_dir))
    return tables, figures


def _sweep_plot(
    grid: Grid,
    sweep: Sweep,
    model: str,
    points: Sequence[Point],
    untrained: Point,
    where: str,
    reference: str,
    out_dir: Path,
) -> Figure:
    name = f"sweep_{sweep.name}_{model}"
    values = [p.value for p in sweep.points]
    drawn = {v: p.value for v, p in zip(values, points, strict=True) if p.value is not None}
    if not drawn:
        return Figure(name, None, "no point of the sweep has a value yet")
    bars = {v: (p.spread.lo, p.spread.hi) for v, p in zip(values, points, strict=True) if p.spread is not None}
    notes = [
        f"not drawn: {sweep.shown(v)} ({p.method}): {p.why}"
        for v, p in zip(values, points, strict=True)
        if p.value is None
    ]
    if untrained.value is None:
        notes.append(f"untrained line not drawn: {untrained.why}")
    notes.append(f"Data: experiment `{grid.experiment}`, model `{model}`, table `{sweep.name}.sweep.md`.")
    path = plot_sweep(
        drawn,
        values,
        out_dir / f"{name}.png",
        title=f"Sensitivity to {sweep.label}: model {model}",
        x_label=sweep.label,
        percent=sweep.percent,
        series=f"trained, {sweep.pruner} / {sweep.budget * 100:g}%",
        reference=reference,
        benchmarks=sweep.benchmarks,
        intervals=bars or None,
        notes=notes,
        baseline=None if untrained.value is None else (f"untrained, {where}", untrained.value),
    )
    return Figure(name, path, "", vector_path(path))
