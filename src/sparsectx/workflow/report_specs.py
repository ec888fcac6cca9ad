"""The grid's ``report:`` entries: paper tables and figures drawn from files the other blocks' jobs write.

Each entry names what it reads: trained ``methods`` (their training runs' per-step logs, ``steps.jsonl``), table
``blocks`` (their evaluation leaves) or both; ``make_tables.py`` renders it with its kind's renderer. No job is
added to the DAG. Each kind is one ``ReportKind`` record in ``REPORT_KINDS`` (the keys its entries set, its
renderer, its title, its own check); the kinds, and what each needs:

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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparsectx.checks import check_registry_key
from sparsectx.paths import BASE
from sparsectx.registry import Registry

if TYPE_CHECKING:
    from sparsectx.workflow.grid import Grid


@dataclass(frozen=True)
class ReportSpec:
    """One ``grid.report`` entry (its kind's ``ReportKind.needs`` says which fields it uses; the others are empty
    or 0)."""

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
        check_registry_key(REPORT_KINDS, kind, f"{key}.kind")
        record = REPORT_KINDS.get(kind)
        given = set(entry) - {"kind"}
        if given != set(record.needs):
            raise ValueError(f"{key}: kind {kind!r} takes exactly {list(record.needs)}, got {sorted(given)}")
        blocks, methods = tuple(entry.get("blocks", ())), tuple(entry.get("methods", ()))
        unknown = [b for b in blocks if b not in tables]
        if unknown:
            raise ValueError(f"{key}.blocks names {unknown}, not table blocks of this grid ({sorted(tables)})")
        if record.one_block and len(blocks) != 1:
            raise ValueError(f"{key}.blocks={list(blocks)}: kind {kind!r} reads exactly one block")
        untrained = [m for m in methods if m not in trained]
        if untrained:
            raise ValueError(
                f"{key}.methods names {untrained}, which no table cell of this grid trains ({sorted(trained)})"
            )
        spec = ReportSpec(name, kind, methods, blocks, entry.get("window", 0), entry.get("items", 0))
        if record.check is not None:
            record.check(spec, grid)
        specs[name] = spec
    return specs


@dataclass(frozen=True)
class ReportKind:
    """Everything the grid and ``make_tables`` know about one kind of ``grid.report`` entry."""

    needs: tuple[str, ...]
    """The keys an entry of this kind sets besides ``kind``, among ``ReportSpec``'s fields (every other key is
    refused)."""
    render: str
    """``<module>:<function>`` that renders an entry: ``function(sparsectx.report.extras.ReportInputs) ->
    (pages, figures)``. A name, not the function: parsing a grid (the Snakefile, the plan) never imports the
    report's plotting stack; ``make_tables`` imports the module when it renders."""
    title: str = ""
    """The page title after ``<experiment>: <name>, `` (``ReportInputs.title``)."""
    one_block: bool = False
    """Whether an entry reads exactly one block."""
    check: Callable[[ReportSpec, Grid], None] | None = None
    """The kind's own check of an entry against the grid (raises ``ValueError`` naming ``grid.report.<name>``);
    None = the checks above suffice."""


def _check_efficiency_runs(spec: ReportSpec, grid: Grid) -> None:
    """Raises unless the grid has efficiency runs (``flops_retain`` reads them)."""
    if not grid.efficiency_runs:
        raise ValueError(
            f"grid.report.{spec.name}: kind 'flops_retain' reads the efficiency runs; grid.efficiency has none"
        )


def _check_trained_row(spec: ReportSpec, grid: Grid) -> None:
    """Raises unless the entry's block has a trained row below budget 1.0 (``recovery_figure`` draws its bars)."""
    (block,) = [b for b in grid.blocks if b.kind == "table" and b.name == spec.blocks[0]]
    if not any(m != BASE and b < 1.0 for row in block.rows for m in row.methods for b in row.budgets):
        raise ValueError(
            f"grid.report.{spec.name}.blocks={list(spec.blocks)}: that block has no trained row below budget 1.0"
        )


REPORT_KINDS: Registry[ReportKind] = Registry("report kind")
"""``grid.report.<name>.kind`` -> its record; the renderers of the shipped kinds are in ``sparsectx.report.extras``."""
REPORT_KINDS.register("training_cost")(
    ReportKind(
        needs=("methods", "blocks"),
        render="sparsectx.report.extras:training_cost_pages",
        title="training cost per sample (SCOPD Table 9, upper)",
        one_block=True,
    )
)
REPORT_KINDS.register("training_dynamics")(
    ReportKind(
        needs=("methods", "window"),
        render="sparsectx.report.extras:dynamics_pages",
        title="training dynamics in windows of steps (SCOPD Fig. 7)",
    )
)
REPORT_KINDS.register("deviation")(
    ReportKind(
        needs=("methods", "window"),
        render="sparsectx.report.extras:dynamics_pages",
        title="student-teacher divergence in windows of steps (LT-OPD Fig. 1 middle)",
    )
)
REPORT_KINDS.register("flops_retain")(
    ReportKind(
        needs=("blocks",),
        render="sparsectx.report.extras:flops_retain_pages",
        title="FLOPs against average retain ratio (LT-OPD Fig. 1 right)",
        check=_check_efficiency_runs,
    )
)
REPORT_KINDS.register("recovery_figure")(
    ReportKind(
        needs=("blocks",),
        render="sparsectx.report.extras:recovery_figure_pages",
        one_block=True,
        check=_check_trained_row,
    )
)
REPORT_KINDS.register("examples")(
    ReportKind(
        needs=("blocks", "items"),
        render="sparsectx.report.extras:examples_pages",
        title="qualitative examples",
        one_block=True,
    )
)
REPORT_KINDS.register("token_sensitivity")(
    ReportKind(
        needs=("methods", "items"),
        render="sparsectx.report.extras:token_sensitivity_pages",
        title="per-token KL against visual sensitivity, untrained and trained (SCOPD Fig. 2a, Fig. 6)",
    )
)
