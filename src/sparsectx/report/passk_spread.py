"""Intervals of the Pass@K table and plots: a bootstrap over the cohort's items of each item's own draws.

Every Pass@K column is a mean over the cohort's items of a per-item value: greedy correctness (100 or 0),
pass@k of the item's n draws (Chen et al.'s unbiased estimator, ``sparsectx.eval.passk``), and the gaps, which
are differences of those. A resample draws the cohort's items with replacement once and every column of the
cell is the count-weighted mean over that same resample, so the columns are paired: the gap's interval is the
spread of the per-resample differences (pass@n - greedy on the same items), not a combination of two
intervals. Both conditions (sparse, no image) hold the same cohort items, so "gap over control" is paired too.

The draws come from ``<bench>.passk.samples.jsonl`` (``sparsectx.eval.passk_mode`` writes every draw before it
aggregates). Before they are used they are checked against the cell's ``passk.json``: the same config hash,
the same cohort, and the same greedy accuracy and pass@k when recomputed; otherwise they are stale and the
table refuses them, naming both files.

Resamples come from ``bootstrap`` of ``conf/make_tables.yaml`` (``sparsectx.report.bootstrap``): the stream
of (seed, "passk", benchmark), the count check ("too few items") and the percentile interval are the block
tables' own. The cohort is an outcome of the run (the items the full-context model solved), so a cohort too
small for ``bootstrap.resamples`` is no configuration error: its row keeps its values and the table's note
says why it has no interval (``too_small``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sparsectx.eval.passk import k_values, pass_at_k
from sparsectx.eval.passk_mode import CONDITIONS
from sparsectx.io import read_jsonl
from sparsectx.report.bootstrap import (
    BootstrapConfig,
    Layout,
    check_enough,
    distinct_resamples,
    draw_counts,
    interval,
    stream,
)

TOLERANCE = 1e-6
"""Absolute tolerance (percentage points) of the recomputed summary against ``passk.json``'s."""

GAP_COLUMNS = ("gap (pp)", "gap over control (pp)")
"""The table's difference columns: marked up / down when their interval excludes 0."""


@dataclass(frozen=True)
class PasskSpread:
    """One Pass@K cell's intervals (percent or percentage points)."""

    columns: dict[str, tuple[float, float]]
    """Table column (``passk.md``'s header) -> interval; the no-image columns only when the control ran."""
    curves: dict[str, dict[int, tuple[float, float]]]
    """Condition (``sparse``, ``no_image``) -> k -> the interval of pass@k: the plot's error bars."""


def item_values(rows: Sequence[Mapping[str, Any]], n: int) -> dict[str, np.ndarray]:
    """Returns one condition's per-item values in percent: ``greedy`` (100 or 0) and ``pass@<k>`` for every
    k of ``passk.json``'s curve, each an array over ``rows`` (one row per item)."""
    flags = [[bool(s["correct"]) for s in row["samples"]] for row in rows]
    values = {"greedy": np.array([100.0 * bool(row["greedy"]["correct"]) for row in rows])}
    for k in k_values(n):
        values[f"pass@{k}"] = np.array([100.0 * pass_at_k(n, sum(f), k) for f in flags])
    return values


def resampled_means(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Returns each resample's mean of ``values`` (``(items,)``): row ``r`` of ``counts`` weights item ``i`` by
    how often resample ``r`` drew it."""
    return (counts @ values) / counts.sum(axis=1)


def check_fresh(payload: Mapping[str, Any], per_condition: Mapping[str, Mapping[str, np.ndarray]], where: str) -> None:
    """Returns None when the draws' per-item values (``item_values`` of each condition) reproduce
    ``passk.json``'s summary; else raises naming the draws' file ``where``."""
    for condition, values in per_condition.items():
        summary = payload[condition]
        recomputed = {"greedy": summary["greedy_accuracy"]}
        recomputed |= {f"pass@{k}": v for k, v in summary["pass_at_k"].items()}
        for name, stored in recomputed.items():
            mean = float(values[name].mean()) if name in values else math.nan
            if not math.isclose(mean, float(stored), abs_tol=TOLERANCE):
                raise ValueError(
                    f"{where}: its {condition} draws give {name} = {mean:.4f}, but the Pass@K JSON says "
                    f"{float(stored):.4f}: the draws are stale (another run's); rerun the cell's Pass@K job "
                    "(`python src/evaluate.py mode=passk ... force=true`) to rewrite both"
                )


def read_draws(payload: Mapping[str, Any], samples_file: Path) -> dict[str, list[dict[str, Any]]]:
    """Returns the cell's draws per condition, in ``passk.json``'s cohort order, after checking that they are
    this run's (config hash and cohort; ``check_fresh`` checks the summary); raises naming ``samples_file``."""
    rows = read_jsonl(samples_file)
    chash = payload.get("provenance", {}).get("config_hash")
    stale = sorted({str(r.get("config_hash")) for r in rows if r.get("config_hash") != chash})
    if stale:
        raise ValueError(
            f"{samples_file}: draws of config {stale[:3]}, but the Pass@K JSON beside it is config {chash}: "
            "the draws are stale; rerun the cell's Pass@K job to rewrite both"
        )
    by_key = {row["key"]: row for row in rows}
    ids = list(payload["cohort"]["ids"])
    by_condition: dict[str, list[dict[str, Any]]] = {}
    for condition in (c for c in CONDITIONS if payload.get(c) is not None):
        missing = [i for i in ids if f"{i}/{condition}" not in by_key]
        if missing:
            raise ValueError(
                f"{samples_file}: no {condition} draws for cohort items {missing[:3]} of the Pass@K JSON "
                "beside it: the draws are incomplete or stale; rerun the cell's Pass@K job"
            )
        by_condition[condition] = [by_key[f"{i}/{condition}"] for i in ids]
    return by_condition


def cohort_layout(ids: Sequence[str]) -> Layout:
    """Returns the resampling layout of a Pass@K cohort: every item its own unit, one stratum."""
    return Layout("passk", tuple(ids), tuple((i,) for i in range(len(ids))), (tuple(range(len(ids))),))


def too_small(size: int, boot: BootstrapConfig) -> str | None:
    """Returns why a cohort of ``size`` items gets no interval (it admits fewer distinct resamples than
    ``bootstrap.resamples``), or None when it can have one."""
    distinct = distinct_resamples(cohort_layout([str(i) for i in range(size)]), boot.resamples)
    if distinct >= boot.resamples:
        return None
    return (
        f"a cohort of {size} items admits only {distinct} distinct resamples, fewer than "
        f"bootstrap.resamples={boot.resamples}"
    )


def cell_values(payload: Mapping[str, Any], samples_file: Path) -> dict[str, dict[str, np.ndarray]]:
    """Returns one Pass@K cell's per-item values per condition (``item_values``, cohort order), after checking
    that its draws are this run's and reproduce its ``passk.json`` summary (``read_draws``, ``check_fresh``)."""
    n = int(payload["n"])
    values = {c: item_values(rows, n) for c, rows in read_draws(payload, samples_file).items()}
    check_fresh(payload, values, str(samples_file))
    return values


def passk_spread(payload: Mapping[str, Any], samples_file: Path, boot: BootstrapConfig, bench: str) -> PasskSpread:
    """Returns the intervals of one Pass@K cell (its ``passk.json`` payload and its draws' file): every table
    column and every k of each condition's curve, all from the same resampled cohort items."""
    values = cell_values(payload, samples_file)
    lay = cohort_layout(tuple(payload["cohort"]["ids"]))
    return spread_of(values, int(payload["n"]), lay, boot, bench)


def pooled_layout(sizes: Mapping[str, int]) -> Layout:
    """Returns the resampling layout of several sources' cohorts pooled in the order of ``sizes`` (source ->
    cohort size): every item its own unit, one stratum per source, so each resample keeps every source's
    count and the pooled mean stays the item-weighted mean of the sources (``pool_passk``)."""
    ids = tuple(f"{source}/{i}" for source, size in sizes.items() for i in range(size))
    starts = np.cumsum([0, *sizes.values()])
    strata = tuple(tuple(range(start, start + size)) for start, size in zip(starts, sizes.values(), strict=False))
    return Layout("passk", ids, tuple((i,) for i in range(len(ids))), strata)


def pooled_spread(
    sources: Mapping[str, tuple[Mapping[str, Any], Path]], boot: BootstrapConfig, label: str
) -> PasskSpread:
    """Returns the intervals of several sources' Pass@K cells pooled into one cohort (SCOPD's 500-item pool):
    ``sources`` maps benchmark -> (its ``passk.json`` payload, its draws' file). Each source's draws are checked
    as its own cell's are; a condition is pooled only when every source ran it (the gaps stay paired)."""
    per_source = {bench: cell_values(payload, draws) for bench, (payload, draws) in sources.items()}
    (n,) = {int(payload["n"]) for payload, _ in sources.values()}
    conditions = [c for c in CONDITIONS if all(c in values for values in per_source.values())]
    pooled = {
        condition: {
            name: np.concatenate([values[condition][name] for values in per_source.values()])
            for name in per_source[next(iter(per_source))][condition]
        }
        for condition in conditions
    }
    sizes = {bench: len(values["sparse"]["greedy"]) for bench, values in per_source.items()}
    return spread_of(pooled, n, pooled_layout(sizes), boot, label)


def spread_of(
    values: Mapping[str, Mapping[str, np.ndarray]], n: int, lay: Layout, boot: BootstrapConfig, label: str
) -> PasskSpread:
    """Returns the intervals of per-item values (condition -> ``item_values``, in ``lay``'s order): every table
    column and every k of each condition's curve from the same resamples of ``lay``, drawn from the stream
    (``bootstrap.seed``, "passk", ``label``)."""
    check_enough(lay, boot.resamples, f"{label} (Pass@K cohort)")
    counts = draw_counts(lay, boot.resamples, stream(boot.seed, "passk", label))
    sparse, control = values["sparse"], values.get("no_image")
    per_item = {
        "greedy (%)": sparse["greedy"],
        "pass@1 (%)": sparse["pass@1"],
        "pass@n (%)": sparse[f"pass@{n}"],
        "gap (pp)": sparse[f"pass@{n}"] - sparse["greedy"],
    }
    if control is not None:
        per_item["no-image pass@n (%)"] = control[f"pass@{n}"]
        per_item["gap over control (pp)"] = sparse[f"pass@{n}"] - sparse["greedy"] - control[f"pass@{n}"]
    level = boot.level
    columns = {name: interval(resampled_means(v, counts), level) for name, v in per_item.items()}
    curves = {
        condition: {
            int(name.split("@")[1]): interval(resampled_means(v, counts), level)
            for name, v in vals.items()
            if name.startswith("pass@")
        }
        for condition, vals in values.items()
    }
    return PasskSpread(columns, curves)
