"""Reading a schema-checked ``grid:`` mapping into typed entries, and the cross-reference checks run on it.

The JSON schema (``workflow/schemas/config.schema.yaml``) checks each key alone; the checks here need several
keys at once (a name a block uses but no section declares, budget 1.0 under a non-reference pruner, ...). Each
raises ``ValueError`` naming the grid key and the fix, while the Snakefile is parsed, before any job runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sparsectx.budget import check_budget
from sparsectx.workflow.cells import BASE, Block, Method, Row

if TYPE_CHECKING:
    from sparsectx.workflow.grid import Grid


def declared(section: Mapping[str, Any]) -> dict[str, str | None]:
    """Returns name -> reason it is unsupported (None when it runs) for a models/pruners/benchmarks section."""
    return {name: (spec or {}).get("unsupported") for name, spec in section.items()}


def parse_budgets(values: Iterable[float], key: str) -> tuple[float, ...]:
    """Returns the checked budgets of the grid key ``key`` (an error names ``key[i]``)."""
    return tuple(check_budget(b, f"{key}[{i}]") for i, b in enumerate(values))


def parse_methods(section: Mapping[str, Any]) -> dict[str, Method]:
    """Returns name -> ``Method`` for ``grid.methods``."""
    return {
        name: Method(name, spec["pruner"], parse_budgets(spec["budgets"], f"grid.methods.{name}.budgets"),
                     spec.get("unsupported"), tuple(spec.get("overrides", ())))
        for name, spec in section.items()
    }  # fmt: skip


def parse_blocks(grid: Mapping[str, Any]) -> Iterable[Block]:
    """Yields the grid's blocks: every ``tables`` entry, then ``passk`` and ``efficiency`` unless null."""
    named = [(name, "table", spec) for name, spec in grid["tables"].items()]
    named += [(kind, kind, grid[kind]) for kind in ("passk", "efficiency") if grid[kind] is not None]
    for name, kind, spec in named:
        key = f"grid.{name}.rows"
        rows = tuple(
            Row(tuple(row["methods"]), tuple(row["pruners"]), parse_budgets(row["budgets"], key))
            for row in spec["rows"]
        )
        yield Block(name, kind, tuple(spec["models"]), tuple(spec["benchmarks"]), rows)


def check_names(grid: Grid) -> None:
    """Returns None when every name a block uses is declared and every declared name is used; else raises.

    Also refuses an unsupported reference pruner and ``unsupported_pruners`` naming unknown pruners or the
    reference pruner (the full-context cells need it).
    """
    if BASE in grid.methods:
        raise ValueError(f"grid.methods.{BASE}: {BASE!r} is the untrained model and is never declared")
    used: dict[str, set[str]] = {"models": set(), "methods": set(), "benchmarks": set()}
    used["pruners"] = {grid.reference_pruner} | {m.pruner for m in grid.methods.values()}
    for block in grid.blocks:
        used["models"].update(block.models)
        used["benchmarks"].update(block.benchmarks)
        for row in block.rows:
            used["methods"].update(m for m in row.methods if m != BASE)
            used["pruners"].update(row.pruners)
    declared_names = {"models": grid.models, "pruners": grid.pruners, "benchmarks": grid.benchmarks}
    for section, names in {**declared_names, "methods": grid.methods}.items():
        undeclared, unused = sorted(used[section] - set(names)), sorted(set(names) - used[section])
        if undeclared:
            raise ValueError(f"the grid's blocks use {section} {undeclared}; grid.{section} lacks them")
        if unused:
            raise ValueError(
                f"grid.{section} declares {unused} but no block uses them: use them (an unsupported "
                "entry then shows as missing cells in the tables) or delete them"
            )
    if grid.pruners[grid.reference_pruner] is not None:
        raise ValueError(f"grid.reference_pruner={grid.reference_pruner!r} is declared unsupported")
    for model, reasons in grid.model_pruners.items():
        unknown = sorted(set(reasons) - set(grid.pruners))
        if unknown:
            raise ValueError(f"grid.models.{model}.unsupported_pruners names {unknown}; grid.pruners lacks them")
        if grid.reference_pruner in reasons:
            raise ValueError(
                f"grid.models.{model}.unsupported_pruners holds the reference pruner "
                f"{grid.reference_pruner!r}: the model's full-context cells need it"
            )


def check_blocks(grid: Grid) -> None:
    """Returns None when every block's budgets and benchmarks are well-formed for its kind; else raises.

    An efficiency block names one benchmark and never budget 1.0 (every efficiency run measures it); a row
    at budget 1.0 keeps every token, so only the reference pruner may list it.
    """
    for block in grid.blocks:
        if block.kind == "efficiency" and len(block.benchmarks) != 1:
            raise ValueError(f"grid.efficiency.benchmarks={list(block.benchmarks)}: name exactly one")
        for row in (r for r in block.rows if 1.0 in r.budgets):
            if block.kind == "efficiency":
                raise ValueError("grid.efficiency: drop budget 1.0; every efficiency run measures it")
            if set(row.pruners) != {grid.reference_pruner}:
                raise ValueError(
                    f"grid.{block.name}: budget 1.0 keeps every token, so pruners {list(row.pruners)} "
                    f"would repeat one run; list 1.0 only in rows whose pruners are "
                    f"[{grid.reference_pruner}] (grid.reference_pruner)"
                )


def parse_train_seeds(seeds: Any, grid_seed: int) -> tuple[int, ...]:
    """Returns ``grid.train_seeds`` as a tuple, in the listed order; else raises naming ``grid.train_seeds``.

    Every trained cell of the tables is trained and evaluated once per seed; the list must name each seed
    once, as an int, and contain ``grid.seed`` (whose checkpoints the ordinary ``runs/`` and ``results/``
    trees hold, and which Pass@K and the efficiency runs evaluate).
    """
    fix = f"list each training seed once as an int, including grid.seed={grid_seed}, e.g. [{grid_seed}]"
    if not isinstance(seeds, list | tuple) or not seeds:
        raise ValueError(f"grid.train_seeds={seeds!r} names no seed: {fix}")
    for i, seed in enumerate(seeds):
        if type(seed) is not int or seed < 0:
            raise ValueError(f"grid.train_seeds[{i}]={seed!r} is not a non-negative int: {fix}")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ValueError(
            f"grid.train_seeds={list(seeds)} repeats {repeated}: a repeated seed would train one run twice and "
            f"count it twice in the tables' mean over seeds; {fix}"
        )
    if grid_seed not in seeds:
        raise ValueError(
            f"grid.train_seeds={list(seeds)} lacks grid.seed={grid_seed}, whose checkpoints the results/ tree, "
            f"Pass@K and the efficiency runs use: add it, or set grid.seed to one of the listed seeds"
        )
    return tuple(seeds)


def check_tables_overrides(overrides: Iterable[str]) -> None:
    """Returns None unless a ``tables`` override sets ``train_seeds``; then raises naming ``grid.train_seeds``.

    The DAG trains the seeds of ``grid.train_seeds`` and passes that list to ``make_tables.py``; a list set by
    hand could ask the tables for seeds no job trains, which would fail only after every job has run.
    """
    for override in overrides:
        if override.lstrip("+~").split("=", 1)[0] == "train_seeds":
            raise ValueError(
                f"the tables stage's overrides set {override!r}: set grid.train_seeds instead (the workflow "
                "trains and evaluates those seeds and passes them to make_tables)"
            )
