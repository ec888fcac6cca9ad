"""Every table cell's 95% interval: the paired bootstrap over items (and training seeds) of one study.

``cell_replicates`` reads each scored cell's per-item records (``sparsectx.report.items``), lays out each
benchmark's resampling units, refuses a benchmark with too few items for ``bootstrap.resamples`` (before any
resample is drawn), and returns each cell's replicate headlines. All rows on one benchmark share its resamples
(paired). A trained row pooled over several training seeds (``sparsectx.report.seeds``) draws, per resample,
its seeds with replacement as well (one draw per model and method, shared by all its cells) and averages the
drawn seeds' replicates: the bootstrap over items and seeds.

``block_spreads`` turns the replicates into what a block's table shows: per row and column the interval of the
score and of the average retain ratio (``sparsectx.eval.aggregate.retain_ratio`` on every resample: the mean
over benchmarks of ``100 x score / full-context score``, both on the same resample), the standard deviation
over seeds, and for trained rows the difference to the untrained model under the same pruner and budget.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sparsectx.eval.aggregate import retain_ratio
from sparsectx.io import read_json_object
from sparsectx.paths import BASE, result_path
from sparsectx.report.bootstrap import (
    BootstrapConfig,
    Layout,
    align,
    check_enough,
    draw_counts,
    interval,
    layout,
    pool_seeds,
    replicates,
    seed_draws,
    stream,
)
from sparsectx.report.collect import RERUN_FIX, Entry, cell_leaf, method_label, ordered_cells
from sparsectx.report.items import Benches, ItemRecords, read_items
from sparsectx.report.seeds import seed_std
from sparsectx.report.tables import Spread, shift_of
from sparsectx.workflow import Block, Cell, Grid

Replicates = dict[Cell, np.ndarray | str]
"""Cell -> its ``(resamples,)`` replicate scores, or why it has no interval."""


def result_paths(grid: Grid, root: str | Path, cell: Cell, entry: dict) -> list[Path]:
    """Returns the result JSON(s) behind a scored entry: one per training seed of a pooled cell, else one."""
    if "seed_paths" in entry:
        return [Path(p) for p in entry["seed_paths"]]
    return [result_path(cell_leaf(root, grid.experiment, cell), cell.bench)]


def _records(paths: Sequence[Path], benches: Benches) -> list[ItemRecords] | str:
    found = []
    for path in paths:
        records = read_items(path, read_json_object(path, RERUN_FIX), benches)
        if isinstance(records, str):
            return records if len(paths) == 1 else f"{path}: {records}"
        found.append(records)
    return found


def cell_replicates(grid: Grid, root: str | Path, entries: Mapping[Cell, Entry], boot: BootstrapConfig) -> Replicates:
    """Returns the replicates of every scored cell of ``entries`` (or why it has none).

    Raises:
        ValueError: a benchmark has too few items for ``bootstrap.resamples`` (``bootstrap.check_enough``),
            raised for the first such benchmark before any resample is drawn, unless ``bootstrap.too_few`` is
            ``no_interval`` (its cells then hold the reason instead of replicates).
    """
    benches: Benches = {}
    per_cell: dict[Cell, list[ItemRecords] | str] = {}
    for cell, entry in entries.items():
        if isinstance(entry, dict):
            per_cell[cell] = _records(result_paths(grid, root, cell, entry), benches)
    layouts: dict[str, tuple[Layout, str]] = {}
    for cell, found in per_cell.items():
        if not isinstance(found, str) and cell.bench not in layouts:
            first = found[0]
            layouts[cell.bench] = (layout(first.scorer, first.items, first.headline), first.bench_sha256)
    too_few = {b: why for b, (lay, _) in layouts.items() if (why := check_enough(lay, boot.resamples, b, boot.too_few))}
    counts = {
        b: draw_counts(lay, boot.resamples, stream(boot.seed, "items", b))
        for b, (lay, _) in layouts.items()
        if b not in too_few
    }
    out: Replicates = {}
    for cell, found in per_cell.items():
        if isinstance(found, str) or cell.bench in too_few:
            out[cell] = found if isinstance(found, str) else too_few[cell.bench]
            continue
        lay, sha = layouts[cell.bench]
        if any(r.bench_sha256 != sha or (r.scorer, r.headline) != (lay.scorer, lay.headline) for r in found):
            out[cell] = "scored on another benchmark file (or scorer or headline) than the other rows of its benchmark"
            continue
        where = f"{cell.method} / {cell.pruner} / {cell.budget:g} on {cell.bench}"
        per_seed = np.stack([replicates(lay, align(lay, r.items, where), counts[cell.bench]) for r in found])
        if len(found) == 1:
            out[cell] = per_seed[0]
        else:
            rng = stream(boot.seed, "seeds", cell.model, cell.method)
            out[cell] = pool_seeds(per_seed, seed_draws(len(found), boot.resamples, rng))
    return out


@dataclass(frozen=True)
class BlockSpreads:
    """What one block's table shows beyond the scores, keyed by (displayed method, pruner, budget, column)."""

    spreads: dict[tuple[str, str, float, str], Spread]
    deltas: dict[tuple[str, str, float, str], tuple[float, Spread]]
    """Trained rows: the difference to the untrained row at the same pruner and budget, and its spread."""
    unavailable: dict[str, list[str]]
    """Why a scored cell has no interval -> the cells ("method / pruner / budget%: column")."""
    avg_intervals: dict[str, dict[float, tuple[float, float]]]
    """"method / pruner" (as the retain plot labels a series) -> budget -> the average retain ratio's interval."""


def block_spreads(
    grid: Grid,
    block: Block,
    model: str,
    entries: Mapping[Cell, Entry],
    reps: Replicates,
    labels: Mapping[str, str],
    avg_label: str,
    level: float,
) -> BlockSpreads:
    """Returns the intervals, seed standard deviations and differences of ``block``'s rows for ``model``."""
    benches = list(block.benchmarks)
    rows = list(dict.fromkeys((c.method, c.pruner, c.budget) for c in ordered_cells(grid, block, model)))
    full = {b: reps.get(Cell(model, BASE, grid.reference_pruner, 1.0, b)) for b in benches}
    spreads: dict[tuple[str, str, float, str], Spread] = {}
    unavailable: dict[str, list[str]] = {}
    row_reps: dict[tuple[str, str, float], dict[str, np.ndarray]] = {}
    avg_reps: dict[tuple[str, str, float], np.ndarray] = {}
    for method, pruner, budget in rows:
        label = method_label(method, labels)
        where = f"{label} / {pruner} / {budget * 100:g}%"
        mine: dict[str, np.ndarray] = {}
        for bench in benches:
            cell = Cell(model, method, pruner, budget, bench)
            value = reps.get(cell)
            if isinstance(value, str):
                unavailable.setdefault(value, []).append(f"{where}: {bench}")
            elif value is not None:
                mine[bench] = value
                std = seed_std(entries[cell])
                spreads[(label, pruner, budget, bench)] = Spread(*interval(value, level), std)
        row_reps[(method, pruner, budget)] = mine
        fulls = [full[b] for b in benches]
        if len(mine) == len(benches) and all(isinstance(f, np.ndarray) for f in fulls):
            with np.errstate(divide="ignore", invalid="ignore"):
                ratios = np.mean([100.0 * mine[b] / full[b] for b in benches], axis=0)  # type: ignore[operator]
            if np.all(np.isfinite(ratios)):
                avg_reps[(method, pruner, budget)] = ratios
                spreads[(label, pruner, budget, avg_label)] = Spread(
                    *interval(ratios, level),
                    _avg_std(entries, model, method, pruner, budget, benches, grid.reference_pruner),
                )
            else:
                why = "the full-context score is 0 on some resample, so the retain ratio is undefined there"
                unavailable.setdefault(why, []).append(f"{where}: {avg_label}")
    deltas = _deltas(rows, row_reps, avg_reps, entries, model, benches, labels, avg_label, level, grid.reference_pruner)
    for key, (_, delta) in deltas.items():
        if key in spreads:
            spreads[key] = Spread(spreads[key].lo, spreads[key].hi, spreads[key].std, delta.shift)
    avg_intervals: dict[str, dict[float, tuple[float, float]]] = {}
    for (method, pruner, budget), ratios in avg_reps.items():
        avg_intervals.setdefault(f"{method_label(method, labels)} / {pruner}", {})[budget] = interval(ratios, level)
    return BlockSpreads(spreads, deltas, unavailable, avg_intervals)


def _avg_std(
    entries: Mapping[Cell, Entry],
    model: str,
    method: str,
    pruner: str,
    budget: float,
    benches: list[str],
    ref: str,
) -> float | None:
    """Returns the standard deviation over training seeds of a pooled row's average retain ratio."""
    cells = [entries[Cell(model, method, pruner, budget, b)] for b in benches]
    full = [entries[Cell(model, BASE, ref, 1.0, b)] for b in benches]
    if any(seed_std(c) is None for c in cells) or not all(isinstance(f, dict) for f in full):
        return None
    per_seed = np.mean([100.0 * np.array(c["seed_scores"]) / f["score"] for c, f in zip(cells, full, strict=True)], 0)  # type: ignore[index]
    return float(np.std(per_seed, ddof=1))


def _point_avg(
    entries: Mapping[Cell, Entry], model: str, row: tuple[str, str, float], benches: list[str], ref: str
) -> float:
    """Returns the average retain ratio of a row's point scores (its table value)."""
    scores = {b: float(entries[Cell(model, *row, b)]["score"]) for b in benches}  # type: ignore[index]
    full = {b: float(entries[Cell(model, BASE, ref, 1.0, b)]["score"]) for b in benches}  # type: ignore[index]
    return retain_ratio(scores, full)


def _deltas(
    rows: list[tuple[str, str, float]],
    row_reps: dict[tuple[str, str, float], dict[str, np.ndarray]],
    avg_reps: dict[tuple[str, str, float], np.ndarray],
    entries: Mapping[Cell, Entry],
    model: str,
    benches: list[str],
    labels: Mapping[str, str],
    avg_label: str,
    level: float,
    ref: str,
) -> dict[tuple[str, str, float, str], tuple[float, Spread]]:
    """Returns each trained row's paired difference to the untrained row at its pruner and budget."""
    out: dict[tuple[str, str, float, str], tuple[float, Spread]] = {}
    for method, pruner, budget in rows:
        base = (BASE, pruner, budget)
        if method == BASE or base not in row_reps:
            continue
        label = method_label(method, labels)
        mine, theirs = row_reps[(method, pruner, budget)], row_reps[base]
        for bench in benches:
            if bench in mine and bench in theirs:
                diff = mine[bench] - theirs[bench]
                a, b = entries[Cell(model, method, pruner, budget, bench)], entries[Cell(model, *base, bench)]
                point = float(a["score"]) - float(b["score"])  # type: ignore[index]
                lo, hi = interval(diff, level)
                out[(label, pruner, budget, bench)] = (point, Spread(lo, hi, None, shift_of(lo, hi)))
        if (method, pruner, budget) in avg_reps and base in avg_reps:
            diff = avg_reps[(method, pruner, budget)] - avg_reps[base]
            lo, hi = interval(diff, level)
            point = _point_avg(entries, model, (method, pruner, budget), benches, ref)
            point -= _point_avg(entries, model, base, benches, ref)
            out[(label, pruner, budget, avg_label)] = (point, Spread(lo, hi, None, shift_of(lo, hi)))
    return out
