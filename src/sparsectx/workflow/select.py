"""A study grid cut to some of its blocks (``make_tables.py blocks=[...]``): a partial study's tables.

The grid's own check refuses a declared model, pruner, benchmark or method that no block uses, so the cut
grid keeps only the declarations its blocks (and its methods' training pruners) use; every kept entry is the
preset's, unchanged, so the kept blocks' cells, reasons and numbers are those of the whole grid.
"""

from __future__ import annotations

from typing import Any

from sparsectx.paths import BASE
from sparsectx.workflow.parse import block_rows

SIDE_BLOCKS = ("passk", "efficiency")
"""Grid keys holding one block each (beside ``tables``, which holds named blocks)."""


def selected_blocks(grid: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """Returns ``grid`` with only the blocks ``names`` lists and the declarations they use.

    Raises:
        ValueError: an unknown or repeated name, or an empty list, naming ``blocks`` and the grid's blocks.
    """
    tables, report = dict(grid.get("tables") or {}), dict(grid.get("report") or {})
    known = [*tables, *(key for key in SIDE_BLOCKS if grid.get(key)), *report]
    unknown = [name for name in names if name not in known]
    if unknown or not names or len(set(names)) != len(names):
        raise ValueError(
            f"blocks={names}: name one or more of this grid's blocks, each once; unknown {unknown}, "
            f"the grid has {known}"
        )
    picked: dict[str, Any] = {**grid, "tables": {name: tables[name] for name in tables if name in names}}
    for key in SIDE_BLOCKS:
        if key not in names:
            picked[key] = None
    picked["report"] = {name: spec for name, spec in report.items() if name in names}  # with the blocks it reads
    kept = [*picked["tables"].values(), *(picked[key] for key in SIDE_BLOCKS if picked[key])]
    rows = [row for block in kept for row in block_rows(block, grid["reference_pruner"])]
    methods = {m for row in rows for m in row["methods"] if m != BASE}
    picked["methods"] = {name: spec for name, spec in grid["methods"].items() if name in methods}
    pruners = {grid["reference_pruner"], *(p for row in rows for p in row["pruners"])}
    pruners |= {spec["pruner"] for spec in picked["methods"].values()}
    picked["pruners"] = {name: spec for name, spec in grid["pruners"].items() if name in pruners}
    benchmarks = {b for block in kept for b in block["benchmarks"]}
    picked["benchmarks"] = {name: spec for name, spec in grid["benchmarks"].items() if name in benchmarks}
    models = {m for block in kept for m in block["models"]}
    picked["models"] = {name: own_pruners(spec, pruners) for name, spec in grid["models"].items() if name in models}
    return picked


def own_pruners(spec: dict[str, Any] | None, pruners: set[str]) -> dict[str, Any] | None:
    """Returns a model's grid entry with ``unsupported_pruners`` cut to the kept ``pruners``."""
    if not spec or "unsupported_pruners" not in spec:
        return spec
    reasons = {p: why for p, why in spec["unsupported_pruners"].items() if p in pruners}
    return {**spec, "unsupported_pruners": reasons}
