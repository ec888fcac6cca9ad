"""The pooled Pass@K row: several benchmarks' cohorts of one (model, method, pruner, budget) as one cohort.

SCOPD's Pass@K analysis (seed 004 §3.1, Fig. 1(b), Fig. 4, App. A) reports one curve over a 500-item pool drawn
from several sources under one rule (``passk.cohort=paper_numeric``). The DAG runs one Pass@K job per
benchmark, so the pool is formed here, from the per-benchmark ``passk.json`` files and their draws:

* values: ``sparsectx.eval.passk_cohort.pool_passk``, the item-weighted mean of the sources (the same pooling
  ``passk_pool.json`` holds when one job runs several benchmarks);
* intervals: a bootstrap over the pooled items with one stratum per source
  (``sparsectx.report.passk_spread.pooled_spread``), so every resample keeps each source's count;
* a figure with the pooled curve, its no-image control and the pooled full-context curve.

A group is pooled when at least two of its benchmarks have a result, all drawn under ``paper_numeric``;
the row names its sources, and a source without a result is left out and named in the row's note.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sparsectx.eval.config import PAPER_NUMERIC
from sparsectx.eval.passk_cohort import pool_passk
from sparsectx.eval.passk_mode import samples_path
from sparsectx.report.bootstrap import BootstrapConfig, distinct_resamples
from sparsectx.report.collect import cell_leaf
from sparsectx.report.passk_spread import PasskSpread, pooled_layout, pooled_spread
from sparsectx.workflow import Cell

POOLED = "pooled"
"""The benchmark column's prefix of a pooled row (``pooled: <source>+<source>...``)."""


@dataclass(frozen=True)
class PooledCell:
    """One pooled group: its pseudo-cell (bench = ``pooled: a+b``), the pooled payload and its sources."""

    cell: Cell
    payload: dict[str, Any]
    """``pool_passk``'s summary shaped as a cell's ``passk.json`` (``cohort.size``, ``sparse``, ``gap``...)."""
    sources: dict[str, tuple[dict[str, Any], Path]]
    """Benchmark -> (its ``passk.json`` payload, its draws' file)."""
    left_out: tuple[str, ...]
    """The group's benchmarks without a result (not in the pool)."""


def pooled_payload(payloads: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Returns the pool of ``payloads`` (``pool_passk``) shaped as one cell's ``passk.json``, so the table row
    and the plot read it as they read a benchmark's."""
    pooled = pool_passk(payloads)
    cohort = {"protocol": pooled["cohort_protocol"], "rule": pooled["cohort_rule"], "size": pooled["size"]}
    return {**pooled, "cohort": cohort}


def pooled_cells(
    root: str | Path, experiment: str, cells: Sequence[tuple[Cell, dict[str, Any] | None]]
) -> list[PooledCell]:
    """Returns the pooled groups of one model's Pass@K cells (cell, its payload or None when it has no
    result): per (method, pruner, budget), the ``paper_numeric`` cells with a result, when there are two or
    more."""
    groups: dict[tuple[str, str, float], list[tuple[Cell, dict[str, Any] | None]]] = {}
    for cell, payload in cells:
        groups.setdefault((cell.method, cell.pruner, cell.budget), []).append((cell, payload))
    pooled = []
    for members in groups.values():
        present = [(c, p) for c, p in members if p is not None and p["sparse"] is not None]
        if len(present) < 2 or any(p["cohort"].get("protocol") != PAPER_NUMERIC for _, p in present):
            continue
        sources = {c.bench: (p, samples_path(cell_leaf(root, experiment, c), c.bench)) for c, p in present}
        first = present[0][0]
        cell = replace(first, bench=f"{POOLED}: {'+'.join(sources)}")
        left_out = tuple(c.bench for c, _ in members if c.bench not in sources)
        pooled.append(PooledCell(cell, pooled_payload([p for _, p in present]), sources, left_out))
    return pooled


def pooled_interval(group: PooledCell, boot: BootstrapConfig) -> PasskSpread | str:
    """Returns the pooled row's intervals, or why it has none (a source without its draws' file, a pool too
    small for ``bootstrap.resamples``)."""
    missing = [str(path.name) for _, path in group.sources.values() if not path.is_file()]
    if missing:
        return f"no per-item draws: {', '.join(missing)} missing"
    sizes = {bench: payload["cohort"]["size"] for bench, (payload, _) in group.sources.items()}
    distinct = distinct_resamples(pooled_layout(sizes), boot.resamples)
    if distinct < boot.resamples:
        return f"a pool of {sum(sizes.values())} items admits only {distinct} distinct resamples"
    return pooled_spread(group.sources, boot, group.cell.bench)


def pooled_reference(group: PooledCell, references: Mapping[str, dict[str, Any] | None]) -> dict[str, Any] | None:
    """Returns the full-context pool over the same sources (``references``: benchmark -> its budget-1.0 cell's
    payload or None), or None unless every source has one with a non-empty cohort."""
    payloads = [references.get(bench) for bench in group.sources]
    if any(p is None or p["sparse"] is None for p in payloads):
        return None
    return pooled_payload(payloads)
