"""The greedy evaluation rules of a grid: one job per (leaf, benchmark), or one job per leaf.

Under ``grid.eval_jobs: benchmark`` (the default) each greedy result is its own job. Under ``grid.eval_jobs:
leaf`` one job scores a leaf (model, method, pruner, budget) on exactly the benchmarks its cells need, in one
process, so a checkpoint is loaded once per leaf. Snakemake rules have fixed outputs, so the per-leaf jobs are
grouped by the benchmarks they write: one rule per group, whose ``{leaf}`` wildcard (``model/method/pruner/
budget``) is constrained to the group's leaves. The largest group keeps the plain rule name (``evaluate_base``,
``evaluate_trained``, ``evaluate_trained_seed``); the others are numbered from 2 (``evaluate_trained_2``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sparsectx.paths import BASE, budget_tag
from sparsectx.workflow.cells import (
    LEAF_JOB_STEM,
    RESULT_PATTERN,
    SEED_RESULT_PATTERN,
    Cell,
    mirror,
)

if TYPE_CHECKING:
    from sparsectx.workflow.grid import Grid

LEAF_WILDCARDS = "{model}/{method}/{pruner}/{budget}"
"""The four wildcards of a per-benchmark result pattern that a per-leaf rule's ``{leaf}`` wildcard replaces."""


@dataclass(frozen=True)
class EvalRule:
    """One greedy evaluation rule of the Snakefile: its name, output patterns, side files and constraints."""

    name: str
    outputs: tuple[str, ...]
    log: str
    benchmark: str
    constraints: dict[str, str]
    """Rule-level wildcard constraints: ``method`` (per-benchmark rules) or ``leaf`` (per-leaf rules)."""


def leaf_name(cell: Cell) -> str:
    """Returns the ``{leaf}`` wildcard value of ``cell``'s leaf: ``model/method/pruner/budget`` as paths spell it."""
    return f"{cell.model}/{cell.method}/{cell.pruner}/{budget_tag(cell.budget)}"


def eval_rules(grid: Grid, kind: str) -> list[EvalRule]:
    """Returns the greedy evaluation rules of ``grid`` of one ``kind``.

    Args:
        grid: the study's grid.
        kind: ``base`` (the untrained model), ``trained`` (checkpoints of ``grid.seed``) or ``trained_seed`` (the
            checkpoints of the other training seeds, written under ``results/seed<s>/``).
    """
    name = f"evaluate_{kind}"
    pattern = SEED_RESULT_PATTERN if kind == "trained_seed" else RESULT_PATTERN
    if grid.eval_jobs == "benchmark":
        methods = grid.constraint("method", exclude=[BASE]) if kind != "base" else re.escape(BASE)
        side = [
            mirror(pattern, root, "evaluate", suffix) for root, suffix in (("logs", ".log"), ("benchmarks", ".tsv"))
        ]
        return [EvalRule(name, (pattern,), *side, {"method": methods})]
    leaf_pattern = pattern.replace(LEAF_WILDCARDS, "{leaf}")
    side = [
        mirror(leaf_pattern, root, "evaluate", suffix).replace("{bench}", LEAF_JOB_STEM)
        for root, suffix in (("logs", ".log"), ("benchmarks", ".tsv"))
    ]
    rules = []
    for number, (benches, leaves) in enumerate(_leaf_groups(grid, kind), start=1):
        outputs = tuple(leaf_pattern.replace("{bench}", bench) for bench in benches)
        constraint = "|".join(re.escape(leaf_name(leaf)) for leaf in leaves)
        rules.append(EvalRule(name if number == 1 else f"{name}_{number}", outputs, *side, {"leaf": constraint}))
    return rules


def eval_rule_name(grid: Grid, cell: Cell, seed: int | None = None) -> str:
    """Returns the name of the rule whose job writes the greedy result of ``cell`` (trained with ``seed``; None:
    ``grid.seed``), as ``eval_rules`` names it."""
    kind = "base" if cell.method == BASE else "trained" if seed in (None, grid.seed) else "trained_seed"
    if grid.eval_jobs == "benchmark":
        return f"evaluate_{kind}"
    leaf = leaf_name(cell)
    for rule in eval_rules(grid, kind):
        if re.fullmatch(rule.constraints["leaf"], leaf):
            return rule.name
    raise ValueError(f"no greedy evaluation job of {grid.experiment} writes the leaf {leaf}")


def _leaf_groups(grid: Grid, kind: str) -> list[tuple[tuple[str, ...], list[Cell]]]:
    """Returns (benchmarks, leaves) of the per-leaf jobs of ``kind``, grouped by what they write, the group with
    the most leaves first."""
    if kind == "trained_seed":
        leaves = sorted({replace(cell, bench="") for cell in grid.seeded_cells})
    else:
        leaves = [leaf for leaf in grid.greedy_leaves if (leaf.method == BASE) == (kind == "base")]
    groups: dict[tuple[str, ...], list[Cell]] = {}
    for leaf in leaves:
        groups.setdefault(grid.greedy_leaves[leaf], []).append(leaf)
    return sorted(groups.items(), key=lambda group: (-len(group[1]), group[0]))
