"""PNG plots: average retain ratio against budget, and Pass@K curves.

Figures are drawn on ``matplotlib.figure.Figure`` with the Agg canvas directly, so no pyplot
state or display backend is involved, and written atomically (temporary file, then
``os.replace``; style convention 19).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sparsectx.report.tables import ResultRecord, build_table


def _save(fig: Figure, path: str | os.PathLike[str]) -> Path:
    out = Path(path)
    if out.suffix.lower() != ".png":
        raise ValueError(f"plot path {out} must end in .png")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp.png")
    FigureCanvasAgg(fig)
    fig.savefig(tmp, format="png", dpi=150, bbox_inches="tight")
    os.replace(tmp, out)
    return out


def retain_series(
    records: Iterable[ResultRecord | Mapping[str, object]],
    *,
    benchmarks: Sequence[str] | None = None,
    reference_method: str = "Vanilla",
) -> tuple[dict[str, dict[float, float]], list[str]]:
    """Returns ``({"method / pruner": {budget: average retain ratio}}, skipped points)``.

    The ratios are the average column of ``build_table``; points whose average is missing are
    left out of the series and listed as "method / pruner / budget%: reason".
    """
    table = build_table(records, benchmarks=benchmarks, reference_method=reference_method)
    series: dict[str, dict[float, float]] = {}
    skipped = []
    for block in table.blocks:
        for row in block.rows:
            avg = row.cells[-1]
            label = f"{row.method} / {row.pruner}"
            if avg.value is None:
                skipped.append(f"{label} / {block.budget * 100:g}%: {table.notes[avg.note - 1][0]}")  # type: ignore[operator]
            else:
                series.setdefault(label, {})[block.budget] = avg.value
    return series, skipped


def plot_retain_vs_budget(
    records: Iterable[ResultRecord | Mapping[str, object]],
    path: str | os.PathLike[str],
    *,
    benchmarks: Sequence[str] | None = None,
    reference_method: str = "Vanilla",
    title: str = "",
) -> Path:
    """Returns the path of a PNG of average retain ratio (%) against budget (%, log axis), per series.

    Points without an average are not drawn; they are listed under the axes so none vanish silently.
    """
    series, skipped = retain_series(records, benchmarks=benchmarks, reference_method=reference_method)
    fig = Figure(figsize=(6.0, 4.0))
    ax = fig.add_subplot()
    budgets = sorted({b for points in series.values() for b in points})
    for label, points in series.items():
        xs = sorted(points)
        ax.plot([100 * x for x in xs], [points[x] for x in xs], marker="o", label=label)
    ax.axhline(100.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xscale("log")
    ax.set_xticks([100 * b for b in budgets], [f"{100 * b:g}" for b in budgets])
    ax.minorticks_off()
    ax.set_xlabel("visual-token budget (%)")
    ax.set_ylabel("average retain ratio (%)")
    ax.set_title(title)
    ax.legend(fontsize="small")
    if skipped:
        fig.text(0.01, -0.02, "not drawn: " + "\n".join(skipped), fontsize="x-small", va="top")
    return _save(fig, path)


def plot_pass_at_k(
    curves: Mapping[str, Mapping[int, float]],
    path: str | os.PathLike[str],
    *,
    title: str = "",
) -> Path:
    """Returns the path of a PNG of pass@k (%) against k (log2 axis), one line per curve.

    Args:
        curves: Label -> ``{k: pass@k in [0, 1]}``, e.g. from ``sparsectx.eval.passk.pass_at_k_curve``.
        path: Output ``.png`` path.
        title: Axes title.
    """
    if not curves:
        raise ValueError("plot_pass_at_k got no curves")
    fig = Figure(figsize=(6.0, 4.0))
    ax = fig.add_subplot()
    ks = sorted({k for curve in curves.values() for k in curve})
    for label, curve in curves.items():
        xs = sorted(curve)
        ax.plot(xs, [100.0 * curve[k] for k in xs], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.minorticks_off()
    ax.set_xlabel("k (samples)")
    ax.set_ylabel("pass@k (%)")
    ax.set_title(title)
    ax.legend(fontsize="small")
    return _save(fig, path)
