"""Reading a schema-checked ``grid:`` mapping into typed entries, and the cross-reference checks run on it.

The JSON schema (``workflow/schemas/config.schema.yaml``) checks each key alone; the checks here need several
keys at once (a name a block uses but no section declares, budget 1.0 under a non-reference pruner, ...). Each
raises ``ValueError`` naming the grid key and the fix, while the Snakefile is parsed, before any job runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparsectx.budget import check_budget
from sparsectx.paths import BASE
from sparsectx.workflow.cells import Block, Method, Row, Sweep, SweepPoint

if TYPE_CHECKING:
    from sparsectx.workflow.grid import Grid


def declared(section: Mapping[str, Any]) -> dict[str, str | None]:
    """Returns name -> reason it is unsupported (None when it runs) for a models/pruners/benchmarks section."""
    return {name: (spec or {}).get("unsupported") for name, spec in section.items()}


def parse_budgets(values: Iterable[float], key: str) -> tuple[float, ...]:
    """Returns the checked budgets of the grid key ``key`` (an error names ``key[i]``)."""
    return tuple(check_budget(b, f"{key}[{i}]") for i, b in enumerate(values))


def parse_methods(section: Mapping[str, Any]) -> dict[str, Method]:
    """Returns name -> ``Method`` for ``grid.methods`` (``preset`` defaults to the method's own name)."""
    return {
        name: Method(
            name,
            spec["pruner"],
            parse_budgets(spec["budgets"], f"grid.methods.{name}.budgets"),
            spec.get("unsupported"),
            tuple(spec.get("overrides", ())),
            spec.get("preset", name),
        )
        for name, spec in section.items()
    }


def check_presets(methods: Mapping[str, Method], conf_dir: str | Path) -> None:
    """Returns None when every variant's ``preset`` is a ``conf/method`` file and no variant takes the name of
    another preset; else raises naming ``grid.methods.<name>.preset``, the missing file and the choices."""
    folder = Path(conf_dir) / "method"
    known = sorted(p.stem for p in folder.glob("*.yaml"))
    for method in (m for m in methods.values() if m.variant):
        key = f"grid.methods.{method.name}.preset"
        if method.preset not in known:
            raise ValueError(f"{key}={method.preset!r}: no {folder / method.preset}.yaml; choose one of {known}")
        if method.name in known:
            raise ValueError(
                f"{key}={method.preset!r}: {method.name!r} is itself the preset {folder / method.name}.yaml, so "
                f"its runs would read as that preset's; give the variant a name no conf/method file has"
            )


def block_rows(spec: Mapping[str, Any], reference_pruner: str) -> list[dict[str, Any]]:
    """Returns the rows of a ``tables`` entry: its ``rows``, or for a sweep the untrained model and every point's
    method at the sweep's pruner and budget, and the normalisation reference at budget 1.0 when it is trained."""
    if spec.get("kind") != "sweep":
        return list(spec["rows"])
    methods = [BASE, *(point["method"] for point in spec["points"])]
    rows = [{"methods": methods, "pruners": [spec["pruner"]], "budgets": [spec["budget"]]}]
    if spec["reference"] != BASE:
        rows.append({"methods": [spec["reference"]], "pruners": [reference_pruner], "budgets": [1.0]})
    return rows


def parse_blocks(grid: Mapping[str, Any]) -> Iterable[Block]:
    """Yields the grid's blocks: every ``tables`` entry (a sweep as its rows, ``block_rows``), then ``passk`` and
    ``efficiency`` unless null."""
    named = [(name, "table", spec) for name, spec in grid["tables"].items()]
    named += [(kind, kind, grid[kind]) for kind in ("passk", "efficiency") if grid[kind] is not None]
    for name, kind, spec in named:
        key = f"grid.{name}.rows"
        rows = tuple(
            Row(tuple(row["methods"]), tuple(row["pruners"]), parse_budgets(row["budgets"], key))
            for row in block_rows(spec, grid["reference_pruner"])
        )
        yield Block(name, kind, tuple(spec["models"]), tuple(spec["benchmarks"]), rows)


def parse_sweeps(grid: Mapping[str, Any]) -> dict[str, Sweep]:
    """Returns name -> ``Sweep`` for the ``tables`` entries of ``kind: sweep``; raises naming the key of a point
    that repeats a value or a method, or names the untrained model."""
    sweeps = {}
    for name, spec in grid["tables"].items():
        if spec.get("kind") != "sweep":
            continue
        key = f"grid.tables.{name}"
        points = tuple(SweepPoint(float(p["value"]), p["method"]) for p in spec["points"])
        for field in ("value", "method"):
            seen = [getattr(p, field) for p in points]
            repeated = sorted({v for v in seen if seen.count(v) > 1}, key=str)
            if repeated:
                raise ValueError(f"{key}.points repeat the {field}s {repeated}: each point is one {field}")
        if any(p.method == BASE for p in points):
            raise ValueError(f"{key}.points name {BASE!r}, the untrained model: each point is a trained method")
        parameter = spec["parameter"]
        sweeps[name] = Sweep(
            name,
            tuple(spec["models"]),
            tuple(spec["benchmarks"]),
            spec["pruner"],
            parse_budgets([spec["budget"]], f"{key}.budget")[0],
            spec["reference"],
            parameter["key"],
            parameter["label"],
            parameter["percent"],
            tuple(sorted(points, key=lambda p: p.value)),
        )
    return sweeps


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
