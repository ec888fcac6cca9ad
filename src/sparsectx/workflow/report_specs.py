"""The grid's ``report:`` entries: paper tables and figures drawn from files the other blocks' jobs write.

Each entry names what it reads: trained ``methods`` (their training runs' per-step logs, ``steps.jsonl``), table
``blocks`` (their evaluation leaves) or both; ``make_tables.py`` renders it (``sparsectx.report.extras``). No
job is added to the DAG. Kinds, and what each needs:

* ``training_cost`` (SCOPD Table 9): ``methods`` (time per sample and peak memory of their training runs) and
  one block (mean output tokens of its cells' evaluation predictions).
* ``training_dynamics`` (SCOPD Fig. 7): ``methods`` trained on their own rollouts, ``window`` steps a point.
* ``deviation`` (LT-OPD Fig. 1 middle): ``methods`` whose loss is a divergence to the teacher, ``window``.
* ``flops_retain`` (LT-OPD Fig. 1 right): ``blocks`` holding the average retain ratio of the efficiency runs'
  rows (the first block with the row gives it); needs ``grid.efficiency``.
* ``recovery_figure`` (LT-OPD Fig. 4): one block with trained rows.
* ``examples`` (qualitative page): one block, ``items`` items per benchmark drawn with ``grid.seed``.
* ``token_sensitivity`` (SCOPD Fig. 2a, Fig. 6): ``methods`` whose runs trace tokens (train override
  ``token_trace``, ``<run>/token_traces.jsonl``) and probe visual sensitivity; ``items`` rollouts per strip
  figure. Rendering raises when a run's traces are missing or lack the sensitivity.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparsectx.paths import BASE

if TYPE_CHECKING:
    from sparsectx.workflow.grid import Grid

NEEDS: dict[str, tuple[str, ...]] = {
    "training_cost": ("methods", "blocks"),
    "training_dynamics": ("methods", "window"),
    "deviation": ("methods", "window"),
    "flops_retain": ("blocks",),
    "recovery_figure": ("blocks",),
    "examples": ("blocks", "items"),
    "token_sensitivity": ("methods", "items"),
}
"""Kind -> the keys an entry of that kind must set (every other key is refused)."""
ONE_BLOCK = ("training_cost", "recovery_figure", "examples")
"""Kinds reading exactly one block."""


@dataclass(frozen=True)
class ReportSpec:
    """One ``grid.report`` entry (``NEEDS`` says which fields its kind uses; the others are empty or 0)."""

    name: str
    kind: str
    methods: tuple[str, ...] = ()
    blocks: tuple[str, ...] = ()
    window: int = 0
    """Optimizer steps averaged into one point of a per-step curve."""
    items: int = 0
    """Items drawn per benchmark (``examples``); rollouts shown per strip figure (``token_sensitivity``)."""


def parse_report(section: Mapping[str, Any], grid: Grid) -> dict[str, ReportSpec]:
    """Returns name -> ``ReportSpec`` of ``grid.report`` (None or absent: none); raises naming the key when an
    entry lacks or adds a key for its kind, names a block that is not a table block, or a method no table
    cell trains."""
    tables = {b.name: b for b in grid.blocks if b.kind == "table"}
    trained = {run.method for run in grid.train_runs}
    specs = {}
    for name, entry in (section or {}).items():
        key, kind = f"grid.report.{name}", entry["kind"]
        given = set(entry) - {"kind"}
        if given != set(NEEDS[kind]):
            raise ValueError(f"{key}: kind {kind!r} takes exactly {list(NEEDS[kind])}, got {sorted(given)}")
        blocks, methods = tuple(entry.get("blocks", ())), tuple(entry.get("methods", ()))
        unknown = [b for b in blocks if b not in tables]
        if unknown:
            raise ValueError(f"{key}.blocks names {unknown}, not table blocks of this grid ({sorted(tables)})")
        if kind in ONE_BLOCK and len(blocks) != 1:
            raise ValueError(f"{key}.blocks={list(blocks)}: kind {kind!r} reads exactly one block")
        untrained = [m for m in methods if m not in trained]
        if untrained:
            raise ValueError(
                f"{key}.methods names {untrained}, which no table cell of this grid trains ({sorted(trained)})"
            )
        if kind == "flops_retain" and not grid.efficiency_runs:
            raise ValueError(f"{key}: kind 'flops_retain' reads the efficiency runs; grid.efficiency has none")
        if kind == "recovery_figure" and not any(
            m != BASE and b < 1.0 for row in tables[blocks[0]].rows for m in row.methods for b in row.budgets
        ):
            raise ValueError(f"{key}.blocks={list(blocks)}: that block has no trained row below budget 1.0")
        specs[name] = ReportSpec(name, kind, methods, blocks, entry.get("window", 0), entry.get("items", 0))
    return specs
