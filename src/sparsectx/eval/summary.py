"""The end-of-run summary ``src/evaluate.py`` logs: one small table per mode, the numbers its outputs hold.

* greedy (``greedy_summary``): per benchmark its scorer, headline score and items scored / skipped;
* Pass@K (``passk_summary``): per benchmark (and pooled cohort) the cohort size, the greedy accuracy at the same
  fixed context, pass@k for every k the run computed and the gap pass@n - greedy, in points;
* efficiency (``efficiency_summary``): per budget the kept visual tokens and each ratio to the unpruned model
  (budget 1 = 1.000): prefill and total FLOPs, KV cache and the latency of each timed stage and in total.

Each reads the files as written (``sparsectx.eval.results``, ``passk_mode``, ``efficiency``), so the summary
shows what the tables will read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sparsectx.eval.efficiency_protocol import STAGES
from sparsectx.eval.passk_mode import POOL_FILE
from sparsectx.io import read_jsonl

MISSING = "-"
"""A value the output does not have (an empty Pass@K cohort)."""
EFFICIENCY_FILE = "efficiency.json"
"""The name ``sparsectx.eval.efficiency.efficiency_path`` gives the efficiency mode's one output."""


def is_passk_output(path: Path) -> bool:
    """Returns whether ``path`` is a Pass@K output: a benchmark's ``<bench>.passk.json`` or a leaf's pooled cohort
    (``passk_pool.json``)."""
    return path.name.endswith(".passk.json") or path.name == POOL_FILE


def is_efficiency_output(path: Path) -> bool:
    """Returns whether ``path`` is the efficiency mode's output (``efficiency.json``)."""
    return path.name == EFFICIENCY_FILE


def _row(bench: str, metric: str, score: str, items: str, path: str) -> str:
    return f"{bench:<16} {metric:<16} {score:>8}  {items:<24} {path}"


def summary_line(path: Path) -> str:
    """Returns one line on a greedy output file: benchmark, metric, score, items scored / skipped, path (a shard's
    predictions part: the items it generated, scored by the merge)."""
    if path.suffix == ".jsonl":
        bench, _, shard = path.name.removesuffix(".jsonl").partition(".predictions.")
        return _row(bench, shard, MISSING, f"{len(read_jsonl(path))} items generated", str(path))
    payload = json.loads(path.read_text())
    counts = f"{payload['n_scored']} scored / {payload['n_skipped']} skipped"
    return _row(payload["benchmark"], payload["scorer"], f"{payload['score']:.2f}", counts, str(path))


def greedy_summary(paths: Sequence[Path]) -> str:
    """Returns the greedy mode's summary: a header and one ``summary_line`` per output."""
    return "\n".join([_row("benchmark", "metric", "score", "items", "path"), *map(summary_line, paths)])


def _passk_name(payload: dict[str, Any]) -> str:
    """Returns a Pass@K output's row name: its benchmark, or ``pooled: a+b`` for a leaf's pooled cohort."""
    return payload["benchmark"] if "benchmark" in payload else "pooled: " + "+".join(payload["sources"])


def _passk_size(payload: dict[str, Any]) -> int:
    return payload["cohort"]["size"] if "cohort" in payload else payload["size"]


def passk_summary(paths: Sequence[Path]) -> str:
    """Returns the Pass@K mode's summary: per output its cohort, greedy accuracy, pass@k for each k and the gap
    pass@n - greedy (points; ``-`` for an empty cohort, where the full-context model solved no item)."""
    payloads = [json.loads(path.read_text()) for path in paths]
    ks = [str(k) for k in payloads[0]["k"]]  # one run draws every benchmark with the same n
    cells = ["greedy", *(f"pass@{k}" for k in ks), "gap (pp)"]
    lines = [f"{'benchmark':<16} {'cohort':>6} " + " ".join(f"{c:>8}" for c in cells) + "  path"]
    for path, payload in zip(paths, payloads, strict=True):
        sparse = payload["sparse"]
        if sparse is None:
            values = [MISSING] * len(cells)
        else:
            values = [f"{sparse['greedy_accuracy']:.2f}", *(f"{sparse['pass_at_k'][k]:.2f}" for k in ks)]
            values.append(f"{payload['gap']:+.2f}")
        row = f"{_passk_name(payload):<16} {_passk_size(payload):>6} " + " ".join(f"{v:>8}" for v in values)
        lines.append(f"{row}  {path}")
    return "\n".join(lines)


def efficiency_summary(path: Path) -> str:
    """Returns the efficiency mode's summary: what was timed, then per budget (1 first) the kept visual tokens,
    the FLOPs, KV-cache and per-stage latency ratios to budget 1 and the total latency in ms."""
    payload = json.loads(path.read_text())
    stages = [*STAGES[payload["protocol"]], "total"]
    model = payload["model"].get("name", MISSING)
    items = f"{payload['num_items']} item{'s' if payload['num_items'] != 1 else ''} timed"
    title = (
        f"efficiency of {model} {payload['method']} / {payload['pruner']} on {payload['bench']}, {items} "
        f"({payload['protocol']}: {payload['statistic']}); ratios to budget 1: FLOPs, KV cache, then the "
        "latency of each stage"
    )
    columns = ["budget", "kept", "prefill_flops", "total_flops", "kv_cache", *stages, "total_ms"]
    lines = [title, " ".join(f"{c:>{max(len(c), 7)}}" for c in columns)]
    for row in payload["budgets"]:
        ratios = row["ratios"]
        values = [f"{row['budget']:g}", f"{row['kept_visual']:g}"]
        values += [f"{ratios[key]:.3f}" for key in ("prefill_flops", "total_flops", "kv_cache")]
        values += [f"{ratios['latency'][stage]:.3f}" for stage in stages]
        values.append(f"{row['latency_ms']['total']:.1f}")
        lines.append(" ".join(f"{v:>{max(len(c), 7)}}" for c, v in zip(columns, values, strict=True)))
    return "\n".join([*lines, f"written to {path}"])
