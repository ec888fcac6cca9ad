"""What was run under one name: the results found under ``<results_root>/<experiment>/``, described as a grid.

``make_tables experiment=<name>`` with no preset (``grid: null``) tables whatever was run there. ``discover``
reads the tree in ``sparsectx.paths``' layout (``<model>/<method>/<pruner>/<budget>/<bench>.json`` greedy
results, ``<bench>.passk.json`` Pass@K results, ``<model>/<method>/<pruner>/efficiency.json``), and
``found_grid`` describes it as a study grid (the ``grid:`` mapping of ``sparsectx.workflow``), which the
preset's code then renders unchanged: one table block per model, its rows the (method, pruner, budget) leaves
that exist, its columns the benchmarks that exist for that model, the untrained ``base`` at budget 1 its
reference row; a Pass@K block and an efficiency block only when such files exist. A row's cell without its
result is footnoted as not run (``not_run``). The mapping is built here, not typed by a user, so it skips the
workflow's JSON schema (whose name pattern is stricter than the folder names ``sparsectx.paths`` allows) and
passes the grid's own cross-checks (``sparsectx.workflow.Grid``).

With a preset, ``outside_grid`` lists the results under its name that its grid does not table (hand runs), so
that ``make_tables`` names them instead of dropping them without a word.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparsectx.eval.passk_mode import POOL_FILE
from sparsectx.io import read_json_object
from sparsectx.paths import BASE, PATH_NAME, budget_tag
from sparsectx.report.collect import RERUN_FIX
from sparsectx.workflow import Cell, EfficiencyRun, Grid

PASSK_SUFFIX = ".passk.json"
"""How a Pass@K result is named in its leaf (``sparsectx.eval.passk_mode.passk_path``)."""
EFFICIENCY_FILE = "efficiency.json"
"""The efficiency run's file beside its budget leaves (``sparsectx.eval.efficiency.efficiency_path``)."""
OUTPUT_STEMS = ("passk", "efficiency", "README", "protocol")
"""Stems of the other files in ``tables/``: a model of that name gets the block ``<model>_scores`` instead."""
LISTED = 12
"""How many leaves a notice names before it says "and N more"."""


Run = tuple[str, str, str]
"""An efficiency run's (model, method, pruner)."""


@dataclass(frozen=True)
class Found:
    """Every result under one experiment's folder, by the kind of file that holds it (from the paths alone)."""

    folder: Path
    """``<results_root>/<experiment>``."""
    results: tuple[Cell, ...]
    """Greedy results (``<bench>.json``)."""
    passk: tuple[Cell, ...]
    """Pass@K results (``<bench>.passk.json``)."""
    efficiency: tuple[Run, ...]
    """Efficiency runs (``efficiency.json``)."""

    @property
    def empty(self) -> bool:
        """Whether nothing was found."""
        return not (self.results or self.passk or self.efficiency)


def _budget(tag: str) -> float | None:
    """Returns the budget a leaf folder spells (``sparsectx.paths.budget_tag``), or None for another folder."""
    try:
        value = float(tag)
    except ValueError:
        return None
    return value if 0.0 < value <= 1.0 and budget_tag(value) == tag else None


def efficiency_run(found: Found, run: Run) -> EfficiencyRun:
    """Returns the budgets and benchmark the ``efficiency.json`` of ``run`` records (its pruned budgets only);
    raises naming the file when it is not one."""
    path = found.folder.joinpath(*run, EFFICIENCY_FILE)
    payload = read_json_object(path, RERUN_FIX)
    if not isinstance(payload.get("budgets"), list) or "bench" not in payload:
        raise ValueError(
            f"{path} lacks 'bench' or 'budgets': it is not the output of python src/evaluate.py mode=efficiency; "
            "delete it or rerun that efficiency run"
        )
    pruned = sorted({float(row["budget"]) for row in payload["budgets"] if float(row["budget"]) < 1.0})
    return EfficiencyRun(*run, tuple(pruned), payload["bench"])


def discover(root: str | Path, experiment: str) -> Found:
    """Returns every result under ``<root>/<experiment>/``, from the paths alone (no file is read); folders and
    files outside the layout are passed over."""
    folder = Path(root) / experiment
    results, passk, runs = [], [], []
    for path in sorted(folder.glob("*/*/*/*/*.json")):
        *names, tag = path.relative_to(folder).parts[:4]
        is_passk = path.name.endswith(PASSK_SUFFIX)
        bench = path.name.removesuffix(PASSK_SUFFIX) if is_passk else path.stem
        budget = _budget(tag)
        if budget is None or path.name == POOL_FILE or not all(PATH_NAME.fullmatch(n) for n in (*names, bench)):
            continue
        (passk if is_passk else results).append(Cell(*names, budget, bench))
    for path in sorted(folder.glob(f"*/*/*/{EFFICIENCY_FILE}")):
        model, method, pruner = path.relative_to(folder).parts[:3]
        if all(PATH_NAME.fullmatch(n) for n in (model, method, pruner)):
            runs.append((model, method, pruner))
    return Found(folder, tuple(results), tuple(passk), tuple(runs))


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _listed(names: Iterable[str]) -> str:
    """Returns ``names`` sorted and joined, in parentheses."""
    return f"({', '.join(sorted(names))})"


def found_line(found: Found) -> str:
    """Returns the line saying what was found: leaves, models, methods and benchmarks (counted and named) and
    the modes that wrote them."""
    cells = [*found.results, *found.passk]
    leaves = {(c.model, c.method, c.pruner, c.budget) for c in cells}
    models = {c.model for c in cells} | {model for model, _, _ in found.efficiency}
    methods = {c.method for c in cells} | {method for _, method, _ in found.efficiency}
    benches = {c.bench for c in cells}
    modes = [
        f"{mode} ({_plural(len(files), one, many)})"
        for mode, files, one, many in (
            ("greedy", found.results, "result", "results"),
            ("passk", found.passk, "result", "results"),
            ("efficiency", found.efficiency, "run", "runs"),
        )
        if files
    ]
    return (
        f"make_tables: found under {found.folder}/: {_plural(len(leaves), 'leaf', 'leaves')}, "
        f"{_plural(len(models), 'model', 'models')} {_listed(models)}, "
        f"{_plural(len(methods), 'method', 'methods')} {_listed(methods)}, "
        f"{_plural(len(benches), 'benchmark', 'benchmarks')} {_listed(benches)}; modes: {', '.join(modes)}"
    )


def reference_pruner(found: Found) -> str:
    """Returns the pruner of the tables' full-context row: the one holding the most untrained results at budget 1
    (else the most results at budget 1, else the most results); ties go to the first name. Every pruner keeps
    every token at budget 1, so one full-context row stands for all of them."""
    cells = [*found.results, *found.passk]
    full = [c for c in cells if c.budget == 1.0]
    pool = [c.pruner for c in full if c.method == BASE] or [c.pruner for c in full] or [c.pruner for c in cells]
    counts = Counter(pool or [pruner for _, _, pruner in found.efficiency])
    return min(counts, key=lambda pruner: (-counts[pruner], pruner))


def _beside_reference(cell: Cell, reference: str) -> bool:
    """Whether ``cell`` is a full-context result under another pruner than the reference row's."""
    return cell.budget == 1.0 and cell.pruner != reference


def _block(cells: Sequence[Cell]) -> dict[str, Any]:
    """Returns the grid block of ``cells``: their models and benchmarks, one row per (method, pruner, budget)
    found (the untrained model first, then by method, pruner and falling budget)."""
    rows = sorted({(c.method, c.pruner, c.budget) for c in cells}, key=lambda r: (r[0] != BASE, r[0], r[1], -r[2]))
    return {
        "models": sorted({c.model for c in cells}),
        "benchmarks": sorted({c.bench for c in cells}),
        "rows": [{"methods": [method], "pruners": [pruner], "budgets": [budget]} for method, pruner, budget in rows],
    }


def found_grid(found: Found, experiment: str) -> dict[str, Any]:
    """Returns the grid mapping that tables ``found`` (see the module docstring); ``left_out`` names the results
    it cannot show.

    A trained method's ``pruner`` and ``budgets`` here are those of its first result: the grid needs them, no
    table reads them (each row is the leaf as found, whatever checkpoint it evaluated).
    """
    reference = reference_pruner(found)
    results = [c for c in found.results if not _beside_reference(c, reference)]
    passk = [c for c in found.passk if not _beside_reference(c, reference)]
    runs = [run for run in (efficiency_run(found, r) for r in found.efficiency) if run.budgets]
    tables = {}
    for model in sorted({c.model for c in results}):
        name = f"{model}_scores" if model in OUTPUT_STEMS else model
        tables[name] = _block([c for c in results if c.model == model])
    efficiency = None
    if runs:
        efficiency = {
            "models": sorted({r.model for r in runs}),
            "benchmarks": [runs[0].bench],  # the table shows each run's file whatever it timed
            "rows": [{"methods": [r.method], "pruners": [r.pruner], "budgets": list(r.budgets)} for r in runs],
        }
    points = [*results, *passk, *(r.cell for r in runs)]
    methods: dict[str, dict[str, Any]] = {}
    for cell in (c for c in points if c.method != BASE):
        methods.setdefault(cell.method, {"pruner": cell.pruner, "budgets": [cell.budget]})
    blocks = [*tables.values(), *([_block(passk)] if passk else []), *([efficiency] if efficiency else [])]
    return {
        "name": experiment,
        "seed": 0,
        "train_seeds": [0],
        "data": {"build": False},
        "reference_pruner": reference,
        "models": {m: {} for m in sorted({m for block in blocks for m in block["models"]})},
        "pruners": {p: {} for p in sorted({reference, *(c.pruner for c in points)})},
        "benchmarks": {b: {} for b in sorted({b for block in blocks for b in block["benchmarks"]})},
        "methods": methods,
        "tables": tables,
        "passk": _block(passk) if passk else None,
        "efficiency": efficiency,
        "overrides": {},
        "resources": {},
    }


def describe(results: Iterable[Cell], passk: Iterable[Cell], runs: Iterable[Run]) -> list[str]:
    """Returns one text per leaf (``model/method/pruner/budget (benchmarks; passk: benchmarks)``) and per
    efficiency run (``model/method/pruner (efficiency)``), sorted."""
    leaves: dict[str, dict[str, list[str]]] = {}
    for kind, cells in (("", results), ("passk: ", passk)):
        for c in cells:
            leaf = f"{c.model}/{c.method}/{c.pruner}/{budget_tag(c.budget)}"
            leaves.setdefault(leaf, {}).setdefault(kind, []).append(c.bench)
    texts = [
        f"{leaf} ({'; '.join(kind + ', '.join(sorted(benches)) for kind, benches in kinds.items())})"
        for leaf, kinds in leaves.items()
    ]
    return sorted([*texts, *(f"{'/'.join(run)} (efficiency)" for run in runs)])


def _shown(texts: Sequence[str]) -> str:
    """Returns the first ``LISTED`` texts joined, then how many more there are."""
    more = [f"and {len(texts) - LISTED} more"] if len(texts) > LISTED else []
    return ", ".join([*texts[:LISTED], *more])


def left_out(found: Found) -> str:
    """Returns the notice naming the results ``found_grid`` cannot table ("" when none): full-context results
    under another pruner than the reference row's, and efficiency runs of budget 1 alone."""
    reference = reference_pruner(found)
    results = [c for c in found.results if _beside_reference(c, reference)]
    passk = [c for c in found.passk if _beside_reference(c, reference)]
    runs = [run for run in found.efficiency if not efficiency_run(found, run).budgets]
    why = []
    if results or passk:
        why.append(
            f"budget 1 keeps every token, so the tables have one full-context row, the one under pruner {reference} "
            "(the pruner of the most untrained results at budget 1)"
        )
    if runs:
        why.append("an efficiency run is shown against its pruned budgets, and these measured budget 1 alone")
    return f"make_tables: not tabled: {_shown(describe(results, passk, runs))}: {'; '.join(why)}" if why else ""


def outside_grid(found: Found, grid: Grid) -> list[str]:
    """Returns the leaves and efficiency runs under the experiment's folder that ``grid`` does not table."""
    greedy = {
        Cell(leaf.model, leaf.method, leaf.pruner, leaf.budget, bench)
        for leaf, benches in grid.greedy_leaves.items()
        for bench in benches
    }
    passk = set(grid.cells("passk"))
    runs = {(r.model, r.method, r.pruner) for r in grid.efficiency_runs}
    return describe(
        [c for c in found.results if c not in greedy],
        [c for c in found.passk if c not in passk],
        [run for run in found.efficiency if run not in runs],
    )


def outside_notice(outside: Sequence[str], root: str | Path, experiment: str) -> str:
    """Returns the notice naming the results outside a preset's grid and how to table them ("" when none)."""
    if not outside:
        return ""
    folder, count = Path(root) / experiment, len(outside)
    return (
        f"make_tables: {_plural(count, 'leaf', 'leaves')} under {folder}/ {'holds' if count == 1 else 'hold'} "
        f"results outside the grid of experiment={experiment}, not tabled: {_shown(outside)}. To table them: "
        f"make_tables experiment={experiment} grid=null tables everything under {folder}/ as found, or run them "
        "under a name of your own (experiment=<a name with no preset>) and make_tables experiment=<that name>"
    )


def not_run(root: str | Path, experiment: str) -> str:
    """Returns the footnote of a cell without a result in a study tabled as found."""
    return (
        f"not run (no result file under {Path(root) / experiment}/ for this row and benchmark; python "
        f"src/evaluate.py experiment={experiment} with its model, method, pruner, budget and bench writes it)"
    )


def experiments_with_results(results_root: str | Path) -> dict[str, int]:
    """Returns {experiment folder: result JSON files in it} under ``results_root`` (for the hint)."""
    root = Path(results_root)
    if not root.is_dir():
        return {}
    found = {d.name: sum(1 for _ in d.rglob("*.json")) for d in sorted(root.iterdir()) if d.is_dir()}
    return {name: n for name, n in found.items() if n}


def nothing_found(root: str | Path, experiment: str) -> str:
    """Returns the error of a study tabled as found (no preset) under which nothing was run: the folder read, the
    names that hold results, and the command that writes one."""
    others = {k: v for k, v in experiments_with_results(root).items() if k != experiment}
    close = difflib.get_close_matches(experiment, others, n=1)
    held = "; ".join(f"{root}/{k}/ ({v} files): make_tables experiment={k}" for k, v in others.items())
    return (
        f"no result under {Path(root) / experiment}/ (experiment={experiment} with no preset grid: its tables are "
        f"what was run there){f'; did you mean experiment={close[0]}?' if close else ''}"
        f"{f'; results exist under {held}' if others else ''}; or write some first, e.g. python src/evaluate.py "
        f"experiment={experiment} model=tiny pruner=visionzip budget=0.1 bench=synthetic"
    )
