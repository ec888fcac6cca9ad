"""A leaf's per-item records, as the bootstrap needs them: each scored item with the model's extracted answer.

A result JSON holds the headline only; its ``<bench>.predictions.jsonl`` holds each item's id and extracted
``answer`` but not what the scorer also reads (reference, accepted answers, options, category, subset, pair
key). Those come from the benchmark file the evaluation read: its path and spec are in the result's
``provenance.config.bench.<bench>`` and its sha256 in ``provenance.inputs.bench_sha256``. The items are
rebuilt exactly as ``evaluate.py`` built them (``sparsectx.eval.protocol.load_bench_items`` and
``scored_item``), and the scorer's headline on them must equal the recorded score; otherwise (or when a file
is missing or changed) the cell gets no interval and the reason, which the table's interval note lists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from omegaconf.errors import OmegaConfBaseException

from sparsectx.data import Item, Skip
from sparsectx.eval.config import BenchSpec, bench_spec_from
from sparsectx.eval.protocol import bench_digest, bench_files, load_bench_items, sample_id, scored_item
from sparsectx.eval.scorers import SCORERS, ScoredItem
from sparsectx.io import read_jsonl
from sparsectx.paths import predictions_path

Benches = dict[tuple[str, str], tuple[list[Item], list[Skip]]]
"""(benchmark file path, sha256) -> its items and skipped rows, read once for every cell that needs them."""


@dataclass(frozen=True)
class ItemRecords:
    """One result's scored items (in the benchmark file's order) and the scorer that rates them."""

    scorer: str
    bench_sha256: str
    items: tuple[ScoredItem, ...]
    headline: str | None = None
    """The scorer's metric the result's ``score`` is (``bench.<name>.headline``), for a scorer with several."""


def _spec(payload: dict[str, Any]) -> BenchSpec | str:
    """Returns the recorded benchmark spec as the current schema reads it (keys it no longer has dropped)."""
    config = (payload.get("provenance") or {}).get("config") or {}
    spec = (config.get("bench") or {}).get(payload["benchmark"])
    if not isinstance(spec, dict):
        return "its result JSON records no benchmark spec (provenance.config.bench), so its items are unknown"
    names = {f.name for f in fields(BenchSpec)}
    try:
        return bench_spec_from({k: v for k, v in spec.items() if k in names})
    except (OmegaConfBaseException, ValueError, KeyError) as err:
        return f"its recorded benchmark spec does not read as a BenchSpec ({type(err).__name__}: {err})"


def _bench_items(spec: BenchSpec, sha: str, skip: float, benches: Benches) -> list[Item] | str:
    try:
        paths = bench_files(spec)
    except FileNotFoundError as err:
        return f"the benchmark file it was scored on is not there (its references are read from it): {err}"
    key = (":".join(map(str, paths)), sha)
    if key not in benches:
        if bench_digest(spec) != sha:
            return f"the benchmark file {', '.join(map(str, paths))} changed after it was scored (sha256 differs)"
        try:
            benches[key] = load_bench_items(spec, skip)
        except ValueError as err:  # the file the result was scored on no longer reads as it did
            return f"its benchmark file no longer reads: {err}"
    return benches[key][0]


def read_items(result: Path, payload: dict[str, Any], benches: Benches) -> ItemRecords | str:
    """Returns the scored items of the result ``payload`` read from ``result``, or why they cannot be had.

    ``benches`` caches the benchmark files read so far. The reasons are for the table's interval note.
    """
    preds = predictions_path(result.parent, payload["benchmark"])
    if not preds.is_file():
        return f"no per-item predictions ({preds.name})"
    if SCORERS.get(payload["scorer"]).version != payload["scorer_version"]:
        return f"scored by {payload['scorer']} version {payload['scorer_version']}, not the installed one"
    found = result_bench(payload, benches)
    if isinstance(found, str):
        return found
    spec, items = found
    sha = payload["provenance"]["inputs"]["bench_sha256"]
    answers = {row["id"]: row["answer"] for row in read_jsonl(preds)}
    absent = [sample_id(item) for item in items if sample_id(item) not in answers]
    if absent or len(answers) != len(items):
        return f"{preds.name} does not hold one row per item of the benchmark file (e.g. lacks {absent[:3]})"
    scored = tuple(scored_item(item, spec, answers[sample_id(item)]) for item in items)
    again = float(SCORERS.get(payload["scorer"])(scored, spec.headline)["score"])
    if not math.isclose(again, float(payload["score"]), rel_tol=1e-9, abs_tol=1e-9):
        return f"its items rescore to {again}, not the recorded {payload['score']}"
    return ItemRecords(payload["scorer"], sha, scored, spec.headline)


def result_bench(payload: dict[str, Any], benches: Benches) -> tuple[BenchSpec, list[Item]] | str:
    """Returns the benchmark spec and items the result ``payload`` was evaluated on (its recorded spec, file
    unchanged since: same sha256), or why they cannot be had; ``benches`` caches the files read."""
    spec = _spec(payload)
    if isinstance(spec, str):
        return spec
    provenance = payload["provenance"]
    sha = (provenance.get("inputs") or {}).get("bench_sha256")
    if sha is None:
        return "its result JSON records no benchmark file digest (provenance.inputs.bench_sha256)"
    items = _bench_items(spec, sha, provenance["config"]["max_skip_fraction"], benches)
    return items if isinstance(items, str) else (spec, items)
