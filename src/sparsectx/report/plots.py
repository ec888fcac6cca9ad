"""Plots, each a PNG with an SVG twin (``vector_path``) and a caption file: average retain ratio against budget,
Pass@K curves, and a hyperparameter sweep's normalised mean against the parameter (``sparsectx.report.budget_plots``
adds recovery against budget and retain ratio against inference cost).

What a plot shows, so a reader can trust it:

* One title (the caller's), the axes and a legend; nothing else is drawn on the figure. What the plot means and
  every note (points not drawn, a missing curve, where the data came from) go to a caption file beside it,
  ``<name>.caption.md`` (``caption_path``): a ``# title`` heading, a paragraph on how to read the plot, then a
  ``Notes`` list.
* Measured points only: a marker at every measured x; a line joins two points of one series only when they are
  adjacent measured values of the plot (budgets of the block, or k), so no segment crosses a budget the series
  lacks, and a pruned budget is never joined to 100%.
* The full-context (unpruned) result is a reference, not a pruner's point: a dashed line labelled
  ``REFERENCE_LABEL``; at 100% retain ratio by definition in the retain plot, the full-context curve in Pass@K.
* Percentage axes start at 0 and reach at least 100 (ticks every 20; higher only when a value exceeds 100).

Figures are drawn on ``matplotlib.figure.Figure`` with the Agg canvas directly, so no pyplot state or display
backend is involved, and every file is written atomically (style convention 19). The files are the same bytes
from any process (no date, a fixed SVG id salt: ``_save_with_vector``), and every series segment carries an SVG id
naming its series (``series_gid``), so a reader of the SVG can take each series' points back out of it.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sparsectx.io import atomic_write_bytes, atomic_write_text
from sparsectx.report.tables import ResultRecord, build_table, to_records

REFERENCE_LABEL = "full context (unpruned)"
"""Legend label of the full-context reference (the unpruned model, every visual token kept)."""
CAPTION_SUFFIX = ".caption.md"
"""A plot ``<name>.png`` has its caption in ``<name>.caption.md`` beside it."""
FIGSIZE = (6.0, 4.0)
DPI = 150
PERCENT_TICK = 20
PERCENT_HEADROOM = 4.0
"""Percentage points above the top tick, so a marker or the reference line at 100% is not drawn on the frame."""
MARKERS = "osD^vP*Xph"
REFERENCE_STYLE = {"color": "black", "linestyle": "--", "linewidth": 1.0}
FLAT_STYLE = {"color": "grey", "linestyle": ":", "linewidth": 1.2}
"""Style of a value that does not depend on k (greedy accuracy): a horizontal dotted line."""
LEGEND_STYLE = {"fontsize": "small", "loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0}
"""The legend sits right of the axes, so it never hides a point (the saved PNG is cropped around both)."""


def caption_path(png: str | os.PathLike[str]) -> Path:
    """Returns the caption file of the plot ``png``: ``<name>.caption.md`` in the same folder."""
    path = Path(png)
    return path.with_name(path.stem + CAPTION_SUFFIX)


def caption_markdown(title: str, description: str, notes: Sequence[str]) -> str:
    """Returns a caption: ``# title``, the description paragraph, then a ``Notes`` list (or "Notes: none")."""
    lines = [f"# {title}", "", description, ""]
    lines += ["Notes:", "", *(f"- {note}" for note in notes)] if notes else ["Notes: none."]
    return "\n".join(lines) + "\n"


def _save(fig: Figure, path: str | os.PathLike[str], caption: str) -> Path:
    out = Path(path)
    if out.suffix.lower() != ".png":
        raise ValueError(f"plot path {out} must end in .png")
    FigureCanvasAgg(fig)
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=DPI, bbox_inches="tight")
    atomic_write_bytes(out, png.getvalue())
    atomic_write_text(caption_path(out), caption)
    return out


VECTOR_SUFFIX = ".svg"
"""A plot's vector twin sits beside its PNG: ``<name>.svg``."""


def vector_path(png: str | os.PathLike[str]) -> Path:
    """Returns the vector (SVG) twin of the plot ``png``: ``<name>.svg`` in the same folder."""
    return Path(png).with_suffix(VECTOR_SUFFIX)


SVG_HASH_SALT = "sparsectx"
"""Seeds the ids matplotlib gives an SVG's shared paths (a random salt per process by default), so the same plot
written by two runs (a local one and a cluster one) is the same bytes."""


def _save_with_vector(fig: Figure, path: str | os.PathLike[str], caption: str) -> Path:
    """Writes the PNG and caption (``_save``) and the SVG twin (``vector_path``; no date and a fixed id salt:
    same plot, same bytes, in any process; ``matplotlib/backends/backend_svg.py``, ``FigureCanvasSVG.print_svg``'s
    ``metadata`` and the ``svg.hashsalt`` rcParam)."""
    out = _save(fig, path, caption)
    svg = io.BytesIO()
    with rc_context({"svg.hashsalt": SVG_HASH_SALT}):
        fig.savefig(svg, format="svg", bbox_inches="tight", metadata={"Date": None})
    atomic_write_bytes(vector_path(out), svg.getvalue())
    return out


def _new_axes(title: str) -> tuple[Figure, Axes]:
    if not title.strip():
        raise ValueError("a plot needs a title (one line saying what it shows)")
    fig = Figure(figsize=FIGSIZE)
    ax = fig.add_subplot()
    ax.set_title(title)
    return fig, ax


def percent_axis(ax: Axes, values: Iterable[float], label: str, axis: str = "y") -> None:
    """Sets ``axis`` ("x" or "y") of ``ax`` to span 0 to 100, extended to the next tick beyond a value outside
    (above 100, or below 0: a recovery worse than not training), with ticks every ``PERCENT_TICK``."""
    shown = [0.0, 100.0, *values]
    bottom = PERCENT_TICK * math.floor(min(shown) / PERCENT_TICK)
    top = PERCENT_TICK * math.ceil(max(shown) / PERCENT_TICK)
    limits = (bottom - (PERCENT_HEADROOM if bottom < 0 else 0.0), top + PERCENT_HEADROOM)
    ticks = range(bottom, top + 1, PERCENT_TICK)
    if axis == "x":
        ax.set_xlim(*limits)
        ax.set_xticks(ticks)
        ax.set_xlabel(label)
    else:
        ax.set_ylim(*limits)
        ax.set_yticks(ticks)
        ax.set_ylabel(label)


def measured_segments(xs: Iterable[float], grid: Sequence[float], joinable: float = math.inf) -> list[list[float]]:
    """Returns the runs of ``xs`` that a line may join: consecutive values of the sorted ``grid``.

    Two measured values are joined only when no value of ``grid`` lies between them and both are below
    ``joinable`` (a value at or above it is drawn on its own); a single value is a run of one (a marker).
    """
    order = {x: i for i, x in enumerate(sorted(grid))}
    runs: list[list[float]] = []
    for x in sorted(xs):
        last = runs[-1][-1] if runs else None
        if last is not None and order[x] == order[last] + 1 and x < joinable:
            runs[-1].append(x)
        else:
            runs.append([x])
    return runs


def series_gid(panel: int, label: str, segment: int) -> str:
    """Returns the SVG id of segment ``segment`` of series ``label`` in panel ``panel`` (the figure's axes, in
    order): ``series-<panel>-<label as UTF-8 hex>-<segment>``, unique in the file, a valid XML name whatever the
    label holds, and read back to the label with ``bytes.fromhex``. matplotlib writes an artist's gid as the id
    of its ``<g>`` (``matplotlib/backends/backend_svg.py``, ``RendererSVG.open_group``), the markers inside it."""
    return f"series-{panel}-{label.encode().hex()}-{segment}"


def draw_runs(ax: Axes, index: int, label: str, runs: Sequence[Sequence[tuple[float, float]]], panel: int = 0) -> None:
    """Draws one series as its runs of (x, y) points: each run a line with a marker per point, in series
    ``index``'s colour and marker, labelled once in the legend, each segment with its ``series_gid``."""
    style = {"color": f"C{index % 10}", "marker": MARKERS[index % len(MARKERS)]}
    for i, run in enumerate(runs):
        xs, ys = [x for x, _ in run], [y for _, y in run]
        ax.plot(xs, ys, label=label if i == 0 else f"_{label}", gid=series_gid(panel, label, i), **style)


def _draw_series(ax: Axes, index: int, label: str, points: Mapping[float, float], runs: list[list[float]]) -> None:
    draw_runs(ax, index, label, [[(x, points[x]) for x in run] for run in runs])


def _error_bar(ax: Axes, index: int, x: float, y: float, bounds: tuple[float, float]) -> float:
    """Draws the interval ``bounds`` around point (x, y) in series ``index``'s colour; returns its top."""
    lo, hi = bounds
    ax.errorbar([x], [y], yerr=[[y - lo], [hi - y]], fmt="none", color=f"C{index % 10}", capsize=3)
    return hi


def retain_series(
    records: Iterable[ResultRecord | Mapping[str, object]],
    *,
    benchmarks: Sequence[str] | None = None,
    reference_method: str = "Vanilla",
) -> tuple[dict[str, dict[float, float]], list[str]]:
    """Returns ``({"method / pruner": {budget: average retain ratio}}, skipped points)``.

    The ratios are the average column of ``build_table``. The full-context reference row (``reference_method``
    at budget 1.0) is no series: it is the 100% every ratio is normalised by. Points whose average is missing
    are left out and listed as "method / pruner / budget%: reason".
    """
    table = build_table(records, benchmarks=benchmarks, reference_method=reference_method)
    series: dict[str, dict[float, float]] = {}
    skipped = []
    for block in table.blocks:
        for row in block.rows:
            if block.budget == 1.0 and row.method == reference_method:
                continue
            avg = row.cells[-1]
            label = f"{row.method} / {row.pruner}"
            if avg.value is None:
                skipped.append(f"{label} / {block.budget * 100:g}%: {table.notes[avg.note - 1][0]}")  # type: ignore[operator]
            else:
                series.setdefault(label, {})[block.budget] = avg.value
    return series, skipped


Intervals = Mapping[str, Mapping[float, tuple[float, float]]]
"""Series label -> budget (fraction) -> (lo, hi) of its average retain ratio."""


def retain_figure(
    series: Mapping[str, Mapping[float, float]],
    budgets: Sequence[float],
    *,
    title: str,
    intervals: Intervals | None = None,
) -> Figure:
    """Returns the figure of average retain ratio (%) against budget (%, log axis), one series per method / pruner.

    Args:
        series: ``retain_series``' first value (budgets as fractions); the full-context row is not among them.
        budgets: Every budget the plot's table measures (drawn or not): the x ticks, and where lines break.
        title: The one title.
        intervals: Error bars, in the series' colour, at the points that have an interval.
    """
    fig, ax = _new_axes(title)
    tops = []
    for index, (label, points) in enumerate(series.items()):
        runs = measured_segments(points, budgets, joinable=1.0)
        _draw_series(ax, index, label, {100 * x: y for x, y in points.items()}, [[100 * x for x in r] for r in runs])
        bars = {x: b for x, b in (intervals or {}).get(label, {}).items() if x in points}
        tops += [_error_bar(ax, index, 100 * x, points[x], b) for x, b in bars.items()]
    ax.axhline(100.0, label=REFERENCE_LABEL, **REFERENCE_STYLE)
    ax.set_xscale("log")
    ax.set_xticks([100 * b for b in sorted(budgets)], [f"{100 * b:g}" for b in sorted(budgets)])
    ax.minorticks_off()
    ax.set_xlabel("visual tokens kept (% of the image's tokens, log scale)")
    values = [y for points in series.values() for y in points.values()] + tops
    percent_axis(ax, values, "average retain ratio (%)")
    ax.legend(**LEGEND_STYLE)
    return fig


RETAIN_CAPTION = (
    "Average retain ratio against the visual-token budget. A row's retain ratio on a benchmark is its score "
    "divided by the full-context {reference} score on that benchmark (x 100); the plot shows its mean over "
    "the benchmarks {benchmarks}. Markers are measured budgets; a line joins two adjacent measured budgets of one "
    "series only (a gap means a budget without an average, listed below). The dashed line is the full context "
    "(unpruned model), 100% by definition."
)
INTERVAL_CAPTION = (
    " Error bars are each average's bootstrap interval over items (and training seeds), as in the table's "
    "interval note."
)


def plot_retain_vs_budget(
    records: Iterable[ResultRecord | Mapping[str, object]],
    path: str | os.PathLike[str],
    *,
    title: str,
    benchmarks: Sequence[str] | None = None,
    reference_method: str = "Vanilla",
    notes: Sequence[str] = (),
    intervals: Intervals | None = None,
) -> Path:
    """Writes the retain-ratio plot of ``records`` to ``path`` (PNG), its SVG twin and its caption; returns
    ``path``.

    The x ticks are the measured budgets below 100%, and 100% when a series other than the reference was
    measured there. Points without an average are not drawn; the caption lists each with its reason, then
    ``notes``. ``intervals`` draws error bars (``retain_figure``).
    """
    recs = to_records(records)
    series, skipped = retain_series(recs, benchmarks=benchmarks, reference_method=reference_method)
    budgets = sorted({r.budget for r in recs if r.budget < 1.0 or r.method != reference_method})
    benches = list(benchmarks) if benchmarks is not None else list(dict.fromkeys(r.benchmark for r in recs))
    description = RETAIN_CAPTION.format(reference=reference_method, benchmarks=", ".join(benches))
    description += INTERVAL_CAPTION if intervals else ""
    not_drawn = [f"not drawn: {point}" for point in skipped]
    caption = caption_markdown(title, description, [*not_drawn, *notes])
    return _save_with_vector(retain_figure(series, budgets, title=title, intervals=intervals), path, caption)


def pass_at_k_figure(
    curves: Mapping[str, Mapping[int, float]],
    *,
    title: str,
    full_context: Mapping[int, float] | None = None,
    references: Mapping[str, float] | None = None,
    intervals: Mapping[str, Mapping[int, tuple[float, float]]] | None = None,
) -> Figure:
    """Returns the figure of pass@k (%) against k (log2 axis): one line per curve, then the references.

    Args:
        curves: Label -> ``{k: pass@k in [0, 1]}``, e.g. from ``sparsectx.eval.passk.pass_at_k_curve``.
        title: The one title.
        full_context: The unpruned model's curve, drawn dashed and labelled ``REFERENCE_LABEL``.
        references: Label -> one value in [0, 1] that does not depend on k (e.g. greedy accuracy): a
            horizontal dotted line each.
        intervals: Curve label -> k -> (lo, hi) in [0, 1]: error bars in the curve's colour.
    """
    if not curves:
        raise ValueError("pass_at_k_figure got no curves")
    fig, ax = _new_axes(title)
    every = [*curves.values(), *([full_context] if full_context else [])]
    ks = sorted({k for curve in every for k in curve})
    tops = []
    for index, (label, curve) in enumerate(curves.items()):
        _draw_series(ax, index, label, {k: 100.0 * v for k, v in curve.items()}, measured_segments(curve, ks))
        bars = (intervals or {}).get(label, {}).items()
        tops += [_error_bar(ax, index, k, 100.0 * curve[k], (100.0 * lo, 100.0 * hi)) for k, (lo, hi) in bars]
    if full_context:
        xs = sorted(full_context)
        ax.plot(xs, [100.0 * full_context[k] for k in xs], marker=".", label=REFERENCE_LABEL, **REFERENCE_STYLE)
    for label, value in (references or {}).items():
        ax.axhline(100.0 * value, label=label, **FLAT_STYLE)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.minorticks_off()
    ax.set_xlabel("k (samples per item, log scale)")
    values = [100.0 * v for curve in every for v in curve.values()] + tops
    values += [100.0 * v for v in (references or {}).values()]
    percent_axis(ax, values, "pass@k (%)")
    ax.legend(**LEGEND_STYLE)
    return fig


PASSK_CAPTION = (
    "Pass@k at a fixed visual context: the fraction of items with at least one correct answer among k samples "
    "(unbiased estimator from n samples per item), against k. Markers are the measured k. The dashed line is the "
    "full context (unpruned model) when it was measured; dotted horizontal lines do not depend on k."
)
PASSK_INTERVAL_CAPTION = (
    " Error bars are each point's bootstrap interval over the cohort's items, as in passk.md's interval note."
)


def plot_pass_at_k(
    curves: Mapping[str, Mapping[int, float]],
    path: str | os.PathLike[str],
    *,
    title: str,
    full_context: Mapping[int, float] | None = None,
    references: Mapping[str, float] | None = None,
    notes: Sequence[str] = (),
    intervals: Mapping[str, Mapping[int, tuple[float, float]]] | None = None,
) -> Path:
    """Writes the Pass@K plot (``pass_at_k_figure``) to ``path`` (PNG), its SVG twin and its caption with
    ``notes``; returns ``path``."""
    fig = pass_at_k_figure(curves, title=title, full_context=full_context, references=references, intervals=intervals)
    description = PASSK_CAPTION + (PASSK_INTERVAL_CAPTION if intervals else "")
    return _save_with_vector(fig, path, caption_markdown(title, description, notes))


def sweep_figure(
    points: Mapping[float, float],
    values: Sequence[float],
    *,
    title: str,
    x_label: str,
    percent: bool,
    series: str,
    reference: str,
    baseline: tuple[str, float] | None = None,
    intervals: Mapping[float, tuple[float, float]] | None = None,
) -> Figure:
    """Returns the figure of a normalised mean score (%) against one hyperparameter (SCOPD Fig. 3).

    Args:
        points: Parameter value -> the point's normalised mean (%); measured values only.
        values: Every value of the sweep (drawn or not): the x ticks, and where the line breaks.
        title: The one title.
        x_label: The parameter's axis label.
        percent: Values are fractions, ticked as percentages.
        series: The legend label of the points' line.
        reference: The legend label of the normalisation reference, a dashed line at 100%.
        baseline: (label, value %): a horizontal dotted line (the untrained model at the sweep's budget).
        intervals: Value -> (lo, hi) of the points that have one: error bars.
    """
    if not points:
        raise ValueError("sweep_figure got no points")
    fig, ax = _new_axes(title)
    xs = sorted(values)
    scale = 100.0 if percent else 1.0
    runs = [[scale * x for x in run] for run in measured_segments(points, xs)]
    _draw_series(ax, 0, series, {scale * x: y for x, y in points.items()}, runs)
    tops = [_error_bar(ax, 0, scale * x, points[x], b) for x, b in (intervals or {}).items() if x in points]
    ax.axhline(100.0, label=reference, **REFERENCE_STYLE)
    if baseline is not None:
        ax.axhline(baseline[1], label=baseline[0], **FLAT_STYLE)
    if all(x > 0 for x in xs):  # values spanning orders of magnitude (5%..100%) are evenly spread on a log axis
        ax.set_xscale("log")
    ax.set_xticks([scale * x for x in xs], [f"{scale * x:g}{'%' if percent else ''}" for x in xs])
    ax.minorticks_off()
    ax.set_xlabel(x_label + (" (log scale)" if all(x > 0 for x in xs) else ""))
    values = [*points.values(), *tops, *([baseline[1]] if baseline is not None else [])]
    percent_axis(ax, values, "mean normalised score (%)")
    ax.legend(**LEGEND_STYLE)
    return fig


SWEEP_CAPTION = (
    "Sensitivity to one hyperparameter: each marker is one trained run (its value of the parameter, all else "
    "equal), evaluated at the same pruner and budget; the y axis is its mean over the benchmarks {benchmarks} of "
    "100 x score / the {reference} score on that benchmark. A line joins two adjacent values of the sweep only when "
    "both were measured (a gap is a point without a value, listed below). The dashed "
    "line is the normalisation reference (100% by definition); the dotted line, when drawn, the untrained model "
    "at the same pruner and budget."
)
SWEEP_INTERVAL_CAPTION = (
    " Error bars are each point's bootstrap interval over items (and training seeds), as in the sweep table."
)


def plot_sweep(
    points: Mapping[float, float],
    values: Sequence[float],
    path: str | os.PathLike[str],
    *,
    title: str,
    x_label: str,
    percent: bool,
    series: str,
    reference: str,
    benchmarks: Sequence[str],
    baseline: tuple[str, float] | None = None,
    intervals: Mapping[float, tuple[float, float]] | None = None,
    notes: Sequence[str] = (),
) -> Path:
    """Writes the sweep plot (``sweep_figure``) to ``path`` (PNG), its SVG twin (``vector_path``) and its caption
    with ``notes``; returns ``path``."""
    fig = sweep_figure(
        points,
        values,
        title=title,
        x_label=x_label,
        percent=percent,
        series=series,
        reference=reference,
        baseline=baseline,
        intervals=intervals,
    )
    description = SWEEP_CAPTION.format(benchmarks=", ".join(benchmarks), reference=reference)
    description += SWEEP_INTERVAL_CAPTION if intervals else ""
    return _save_with_vector(fig, path, caption_markdown(title, description, notes))
