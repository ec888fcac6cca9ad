"""Trained rows from several training seeds: where each seed's results live, and their pooled entries.

``train_seeds`` (``conf/make_tables.yaml``) lists the training seeds a trained row pools; null means the grid's
one seed (``grid.seed``). The grid's seed reads the ordinary leaves under ``results_root``; any other seed ``s``
reads the same layout under ``<results_root>/seed<s>/`` (``seed_root``), i.e. what ``evaluate.py
results_root=<results_root>/seed<s>`` writes for the checkpoint trained with ``seed=<s>``. The untrained rows do
not depend on a training seed and are always read from ``results_root``.

A pooled cell's score is the mean over the seeds' scores; it keeps each seed's score (``seed_scores``) for the
standard deviation and the result paths (``seed_paths``) for the bootstrap's per-item records.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sparsectx.paths import BASE, result_path
from sparsectx.report.collect import Entry, cell_leaf, read_result
from sparsectx.workflow import Cell, Grid


def check_seed_list(seeds: Sequence[int] | None) -> None:
    """Returns None for a usable ``train_seeds`` (null, or distinct ints); else raises naming the key."""
    if seeds is None:
        return
    if not seeds:
        raise ValueError("train_seeds=[] names no seed: list the training seeds to pool, or null for grid.seed")
    repeated = sorted({s for s in seeds if list(seeds).count(s) > 1})
    if repeated:
        raise ValueError(
            f"train_seeds={list(seeds)} repeats {repeated}: a repeated seed would count one training run twice "
            "in the mean and the bootstrap; list each seed once"
        )


def seed_root(results_root: str | Path, seed: int, grid_seed: int) -> Path:
    """Returns the results root of training seed ``seed``: ``results_root`` itself for the grid's seed, else
    ``<results_root>/seed<seed>``."""
    return Path(results_root) if seed == grid_seed else Path(results_root) / f"seed{seed}"


def seed_result(grid: Grid, results_root: str | Path, seed: int, cell: Cell) -> Path:
    """Returns the result JSON of trained ``cell`` for training seed ``seed``."""
    return result_path(cell_leaf(seed_root(results_root, seed, grid.seed), grid.experiment, cell), cell.bench)


def trained_cells(grid: Grid, entries: Mapping[Cell, Entry]) -> list[Cell]:
    """Returns the supported trained cells of the table blocks (those ``train_seeds`` applies to)."""
    return [c for c in entries if c.method != BASE and grid.reason(c) is None]


def check_trained(grid: Grid, results_root: str | Path, seeds: Sequence[int], cells: Sequence[Cell]) -> None:
    """Returns None when every training seed has some result for every trained method of the tables; else
    raises naming ``train_seeds``, each seed with no result at all and where it was looked for.

    A seed that has results for some cells only is not an error: the others are footnoted as missing.
    """
    untrained = []
    for method in sorted({c.method for c in cells}):
        mine = [c for c in cells if c.method == method]
        for seed in seeds:
            if not any(seed_result(grid, results_root, seed, c).is_file() for c in mine):
                leaf = cell_leaf(seed_root(results_root, seed, grid.seed), grid.experiment, mine[0])
                where = leaf.parents[1]  # <root>/<experiment>/<model>/<method>
                untrained.append(f"{method} seed {seed} (nothing under {where}/)")
    if untrained:
        raise ValueError(
            f"train_seeds={list(seeds)} asks for seeds that were not trained (or not evaluated): "
            f"{'; '.join(untrained)}. Train and evaluate them (seed s reads results_root/seed<s>/ unless s is "
            f"grid.seed={grid.seed}; docs/tables.md), or drop them from train_seeds"
        )


def pooled_entries(
    grid: Grid,
    results_root: str | Path,
    seeds: Sequence[int],
    entries: Mapping[Cell, Entry],
    score_source: str,
) -> dict[Cell, Entry]:
    """Returns ``entries`` with every trained cell pooled over ``seeds``: the mean score with ``seed_scores``
    and ``seed_paths``, or the reason when a seed has no result for it."""
    pooled: dict[Cell, Entry] = dict(entries)
    for cell in trained_cells(grid, entries):
        paths = [seed_result(grid, results_root, seed, cell) for seed in seeds]
        absent = [seed for seed, path in zip(seeds, paths, strict=True) if not path.is_file()]
        if absent:
            pooled[cell] = f"no result for training seed(s) {absent} of train_seeds"
            continue
        records = [read_result(path, cell, score_source) for path in paths]
        scores = [float(r["score"]) for r in records]
        entry: dict[str, Any] = {**records[0], "score": math.fsum(scores) / len(scores)}
        entry["caveat"] = "; ".join(dict.fromkeys(r["caveat"] for r in records if r["caveat"]))
        entry |= {"seed_scores": scores, "seed_paths": [str(p) for p in paths]}
        pooled[cell] = entry
    return pooled


def seed_std(entry: Entry) -> float | None:
    """Returns the sample standard deviation of a pooled entry's seed scores (None for one seed)."""
    if not isinstance(entry, dict) or len(entry.get("seed_scores") or ()) < 2:
        return None
    return statistics.stdev(entry["seed_scores"])
