"""Fake Pass@K leaves: per-item draws and the ``passk.json`` that ``passk_mode`` would write from them.

The summary comes from the real aggregation (``sparsectx.eval.passk_mode.summarize``), so a fake leaf's JSON
and draws agree exactly as a real run's do; tests then break that agreement on purpose.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparsectx.eval.passk import k_values
from sparsectx.eval.passk_cohort import RULES
from sparsectx.eval.passk_mode import passk_path, samples_path, summarize
from sparsectx.eval.results import write_json
from sparsectx.io import append_jsonl

CONFIG_HASH = "0123456789abcdef"


def draw_rows(condition: str, greedy: list[bool], correct: list[int], n: int) -> list[dict[str, Any]]:
    """Returns one condition's draw rows: item ``i`` (id ``str(i)``) is greedy-correct when ``greedy[i]`` and
    has ``correct[i]`` of its ``n`` samples correct (the first ones)."""
    return [
        {
            "key": f"{i}/{condition}",
            "id": str(i),
            "condition": condition,
            "seed": i,
            "kept_indices": [],
            "greedy": {"correct": ok},
            "samples": [{"correct": s < c} for s in range(n)],
            "config_hash": CONFIG_HASH,
        }
        for i, (ok, c) in enumerate(zip(greedy, correct, strict=True))
    ]


def passk_payload(
    rows: list[dict[str, Any]], n: int, bench: str, budget: float, protocol: str = "authors_code"
) -> dict[str, Any]:
    """Returns the ``passk.json`` fields the tables read, aggregated from ``rows`` as ``passk_mode`` does, its
    cohort drawn under ``protocol`` (``passk.cohort``)."""
    sparse = summarize([r for r in rows if r["condition"] == "sparse"], [1])
    control = summarize([r for r in rows if r["condition"] == "no_image"], [1])
    gap = sparse["pass_at_k"][str(n)] - sparse["greedy_accuracy"]
    floor = None if control is None else control["pass_at_k"][str(n)]
    ids = [r["id"] for r in rows if r["condition"] == "sparse"]
    return {
        "benchmark": bench,
        "method": "base",
        "pruner": "visionzip",
        "budget": budget,
        "n": n,
        "k": k_values(n),
        "cohort": {
            "protocol": protocol,
            "rule": RULES[protocol],
            "size": len(ids),
            "source": "test",
            "ids": ids,
            "counts": {"rows": len(ids)},
        },
        "sparse": sparse,
        "no_image": control,
        "gap": gap,
        "control_floor": floor,
        "gap_over_control": None if floor is None else gap - floor,
        "provenance": {"config_hash": CONFIG_HASH},
    }


def write_passk_leaf(
    leaf: Path,
    bench: str,
    budget: float,
    sparse: tuple[list[bool], list[int]],
    control: list[int],
    n: int,
    protocol: str = "authors_code",
) -> dict[str, Any]:
    """Writes ``<bench>.passk.json`` and its draws into ``leaf`` and returns the JSON: ``sparse`` is (greedy
    correctness, correct samples) per item, ``control`` the no-image correct samples (greedy wrong);
    ``protocol`` is the cohort rule it names."""
    rows = draw_rows("sparse", *sparse, n) + draw_rows("no_image", [False] * len(control), control, n)
    payload = passk_payload(rows, n, bench, budget, protocol)
    leaf.mkdir(parents=True, exist_ok=True)
    append_jsonl(samples_path(leaf, bench), rows)
    write_json(passk_path(leaf, bench), payload)
    return payload
