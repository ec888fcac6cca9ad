"""The greedy evaluation rules (``sparsectx.workflow.eval_jobs``): per (leaf, benchmark) by default, or one job per
leaf writing exactly the benchmarks its cells need (``grid.eval_jobs: leaf``), checked against the files the tables
and Pass@K read (``Grid.leaf``, ``Grid.reference_leaf``), not against the grouping itself."""

from __future__ import annotations

import re
from pathlib import Path

from workflow.test_grid import build, tiny_raw

from sparsectx import workflow as wf


def leaf_grid(train_seeds: list[int] | None = None) -> wf.Grid:
    """Returns the tiny grid with per-leaf jobs whose leaves need different benchmarks: the sweep reads syn_detail
    only, and Pass@K adds syn_mcq (in no table) to the full-context reference leaf."""
    raw = tiny_raw()
    raw["eval_jobs"] = "leaf"
    raw["tables"]["sweep"]["benchmarks"] = ["syn_detail"]
    raw["benchmarks"]["syn_mcq"] = {}
    raw["passk"]["benchmarks"] = ["syn_detail", "syn_mcq"]
    if train_seeds:
        raw["train_seeds"] = train_seeds
    return build(raw)


def needed_files(grid: wf.Grid) -> set[str]:
    """Returns every greedy result the tables and the Pass@K cohorts read."""
    references = {grid.reference_leaf(c.model, c.bench) for c in grid.cells("passk")}
    return set(grid.leaves("table")) | references


def written_files(grid: wf.Grid, kinds: tuple[str, ...] = ("base", "trained")) -> dict[str, list[str]]:
    """Returns file -> the rules whose jobs write it: each rule's outputs filled in for every leaf its ``{leaf}``
    constraint admits, among the leaves of ``needed_files`` (the only ones a target can ask for)."""
    leaves = {str(Path(f).parent.relative_to(f"results/{grid.experiment}")) for f in needed_files(grid)}
    writers: dict[str, list[str]] = {}
    for kind in kinds:
        for rule in wf.eval_rules(grid, kind):
            for leaf in leaves:
                if re.fullmatch(rule.constraints["leaf"], leaf):
                    for output in rule.outputs:
                        writers.setdefault(output.format(experiment=grid.experiment, leaf=leaf), []).append(rule.name)
    return writers


def test_per_leaf_jobs_write_exactly_the_benchmarks_their_leaf_needs() -> None:
    grid = leaf_grid()
    writers = written_files(grid)
    assert set(writers) == needed_files(grid)  # nothing the tables do not read, nothing missing
    assert all(len(rules) == 1 for rules in writers.values())  # one job writes each file
    sweep_only = wf.Cell("tiny", "base", "random", 0.05, "")
    reference = wf.Cell("tiny", "base", "visionzip", 1.0, "")
    assert grid.job_benches(sweep_only) == ["syn_detail"]
    assert grid.job_benches(reference) == ["syn_count", "syn_detail", "syn_mcq", "syn_ocr", "syn_pope"]
    assert "bench=[syn_detail]" in wf.evaluate_args(grid, sweep_only)
    names = {rule.name for kind in ("base", "trained") for rule in wf.eval_rules(grid, kind)}
    assert {"evaluate_base", "evaluate_base_2", "evaluate_trained"} <= names  # the largest group has the plain name
    for file, (rule,) in writers.items():
        cell = wf.Cell(*Path(file).parent.parts[2:5], float(Path(file).parent.name), "")
        assert wf.eval_rule_name(grid, cell) == rule


def test_the_jobs_of_the_other_training_seeds_write_the_trained_leaves_under_their_seed() -> None:
    grid = leaf_grid(train_seeds=[0, 1])
    (rule,) = wf.eval_rules(grid, "trained_seed")
    assert rule.name == "evaluate_trained_seed"
    trained = {wf.leaf_name(c) for c in grid.seeded_cells}
    assert all(re.fullmatch(rule.constraints["leaf"], leaf) for leaf in trained)
    assert not re.fullmatch(rule.constraints["leaf"], "tiny/base/visionzip/1")
    assert rule.outputs[0].startswith("results/seed{seed}/{experiment}/{leaf}/")
    assert rule.log == "logs/evaluate/seed{seed}/{experiment}/{leaf}/all_benchmarks.log"
    leaf = wf.Cell("tiny", "scopd", "visionzip", 0.1, "")
    assert wf.eval_rule_name(grid, leaf, seed=1) == "evaluate_trained_seed"
    args = wf.evaluate_args(grid, leaf, seed=1)
    assert f"checkpoint={grid.checkpoint_dir(grid.train_run(leaf), 1)}" in args


def test_per_benchmark_jobs_are_the_default() -> None:
    grid = build(tiny_raw())
    assert grid.eval_jobs == "benchmark"
    (base,) = wf.eval_rules(grid, "base")
    (trained,) = wf.eval_rules(grid, "trained")
    assert base.outputs == trained.outputs == (wf.RESULT_PATTERN,)
    assert base.log == wf.mirror(wf.RESULT_PATTERN, "logs", "evaluate", ".log")
    assert base.constraints == {"method": "base"}
    assert "base" not in trained.constraints["method"].split("|")
    cell = wf.Cell("tiny", "scopd", "random", 0.1, "syn_count")
    assert wf.eval_rule_name(grid, cell) == "evaluate_trained" and grid.job_benches(cell) == ["syn_count"]


def test_a_per_leaf_job_names_its_cell_and_seed_from_its_wildcards() -> None:
    assert wf.cell_of({"experiment": "e", "leaf": "tiny/scopd/visionzip/0.1"}) == wf.Cell(
        "tiny", "scopd", "visionzip", 0.1, ""
    )
    assert wf.seed_of({"leaf": "tiny/scopd/visionzip/0.1"}) is None
    assert wf.seed_of({"seed": "2", "leaf": "tiny/scopd/visionzip/0.1"}) == 2
