"""``grid.train_seeds``: every trained cell of the tables trained and evaluated once per seed, in the layout
``sparsectx.report.seeds`` reads; untrained cells, Pass@K and efficiency once; the refusals name the key.

The expansion is checked through ``sparsectx.workflow``; the Snakefile's jobs by a dry run (as
``test_snakefile.py`` does, from the repo root on an empty working directory).
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparsectx import workflow as wf
from sparsectx.paths import leaf_dir, result_path, run_dir
from sparsectx.report.seeds import seed_result

PRESETS = sorted(p.stem for p in (wf.CONF_DIR / "experiment").glob("*.yaml"))
BENCHES = ["syn_count", "syn_ocr"]
SMALL: dict[str, Any] = {
    "train_seeds": [0, 1],
    "pruners": {"visionzip": {}, "random": {}},
    "benchmarks": {b: {} for b in BENCHES},
    "methods": {"scopd": {"pruner": "visionzip", "budgets": [0.1]}},
    "tables": {
        "main": {
            "models": ["tiny"],
            "benchmarks": BENCHES,
            "rows": [{"methods": ["base", "scopd"], "pruners": ["visionzip", "random"], "budgets": [0.1]}],
        }
    },
    "passk": {
        "models": ["tiny"],
        "benchmarks": ["syn_count"],
        "rows": [{"methods": ["base", "scopd"], "pruners": ["visionzip"], "budgets": [0.1]}],
    },
    "efficiency": {
        "models": ["tiny"],
        "benchmarks": ["syn_count"],
        "rows": [{"methods": ["scopd"], "pruners": ["visionzip"], "budgets": [0.1]}],
    },
}
"""A small tiny grid: 2 references, 4 untrained and 4 trained table cells (one checkpoint), Pass@K and
efficiency naming the trained method too."""
RUN = wf.TrainRun("tiny", "scopd", "visionzip", 0.1)
TRAINED = [wf.Cell("tiny", "scopd", p, 0.1, b) for p in ("random", "visionzip") for b in BENCHES]


def small(**replace: Any) -> wf.Grid:
    """Returns the checked grid of the tiny preset with ``SMALL``'s keys (then ``replace``'s) replaced."""
    return wf.load_grid("tiny", {**copy.deepcopy(SMALL), **replace})


def value(args: list[str], key: str) -> str:
    """Returns the value of the one ``key=...`` override in ``args``."""
    (found,) = [a.split("=", 1)[1] for a in args if a.split("=", 1)[0] == key]
    return found


# ---- expansion -------------------------------------------------------------------------------------------
def test_each_trained_cell_has_one_leaf_per_seed_and_each_untrained_cell_one() -> None:
    grid = small()
    assert grid.train_seeds == (0, 1) and grid.extra_seeds == [1]
    assert sorted(grid.seeded_cells) == TRAINED
    assert grid.targets("trained") == sorted(
        [grid.leaf(c) for c in TRAINED]
        + [f"results/seed1/tiny/tiny/scopd/{c.pruner}/0.1/{c.bench}.json" for c in TRAINED]
    )
    assert grid.targets("train") == [
        "runs/seed1/tiny/tiny/scopd/visionzip/0.1/checkpoint/config.json",
        "runs/tiny/tiny/scopd/visionzip/0.1/checkpoint/config.json",
    ]
    untrained = grid.targets("full_context") + grid.targets("sweep")
    assert len(untrained) == 2 + 4 and not [leaf for leaf in untrained if "seed" in leaf]
    # Pass@K and efficiency evaluate grid.seed's checkpoint only (make_tables pools table rows only)
    assert not [leaf for stage in ("passk", "efficiency") for leaf in grid.targets(stage) if "seed" in leaf]
    assert grid.names("seed") == ["1"] and grid.constraint("seed") == "1"


def test_a_seed_trains_with_seed_s_into_runs_seed_s() -> None:
    grid = small()
    other, own = wf.train_args(grid, RUN, seed=1), wf.train_args(grid, RUN)
    assert value(other, "seed") == "1" and value(own, "seed") == "0"
    assert "runs_root" not in {a.split("=")[0] for a in own}  # grid.seed keeps conf/train.yaml's runs/
    # train.py writes <runs_root>/<experiment>/... (conf/train.yaml hydra.run.dir): the marker the DAG declares
    trained_dir = run_dir(value(other, "runs_root"), "tiny", "tiny", "scopd", "visionzip", 0.1)
    assert grid.checkpoint_marker(RUN, 1) == f"{trained_dir}/checkpoint/{wf.CHECKPOINT_MARKER}"
    assert [a for a in other if a.split("=")[0] not in ("seed", "runs_root")] == [
        a for a in own if a.split("=")[0] != "seed"
    ]


def test_a_seed_is_evaluated_from_its_checkpoint_into_results_seed_s() -> None:
    grid = small()
    cell = wf.Cell("tiny", "scopd", "random", 0.1, "syn_ocr")
    args = wf.evaluate_args(grid, cell, seed=1)
    assert (
        value(args, "checkpoint")
        == grid.checkpoint_dir(RUN, 1)
        == "runs/seed1/tiny/tiny/scopd/visionzip/0.1/checkpoint"
    )
    # the evaluation draws as the untrained rows do (pruner masks, sampling): seeds differ by training only
    assert value(args, "seed") == "0"
    # evaluate.py writes <results_root>/<experiment>/... (conf/evaluate.yaml hydra.run.dir)
    written = result_path(leaf_dir(value(args, "results_root"), "tiny", "tiny", "scopd", "random", 0.1), "syn_ocr")
    assert grid.leaf(cell, seed=1) == str(written)
    assert grid.checkpoint_inputs(cell, 1) == [grid.checkpoint_marker(RUN, 1)]
    assert "results_root" not in {a.split("=")[0] for a in wf.evaluate_args(grid, cell)}
    with pytest.raises(ValueError, match="only greedy results of a trained cell"):
        wf.evaluate_args(grid, cell, mode="passk", seed=1)


def test_the_seed_layout_is_the_one_make_tables_reads() -> None:
    grid = small(train_seeds=[0, 1, 7])
    for seed in grid.train_seeds:
        for cell in TRAINED:
            assert grid.leaf(cell, seed=seed) == str(seed_result(grid, "results", seed, cell))
    values = dict(experiment="tiny", model="tiny", method="scopd", pruner="random", budget="0.1", bench="syn_ocr")
    assert wf.SEED_RESULT_PATTERN.format(seed=7, **values) == grid.leaf(TRAINED[1], seed=7)
    assert wf.SEED_CHECKPOINT_PATTERN.format(seed=7, **{**values, "pruner": "visionzip"}) == (
        grid.checkpoint_marker(RUN, 7)
    )


def test_make_tables_gets_the_seeds_only_when_there_are_several() -> None:
    assert value(wf.tables_args(small()), "train_seeds") == "[0,1]"
    assert value(wf.tables_args(small(train_seeds=[2, 0], seed=2)), "train_seeds") == "[2,0]"
    assert wf.tables_args(small(train_seeds=[0])) == ["experiment=tiny", *small().overrides("tables")]


STUDY_PRESETS = ["tiny_scopd", "tiny_ltopd"]
"""make study's presets: every trained row from three training seeds (issue 20)."""


@pytest.mark.parametrize("name", [p for p in PRESETS if p not in STUDY_PRESETS])
def test_every_preset_trains_one_seed_as_before(name: str) -> None:
    grid = wf.load_grid(name)
    assert grid.train_seeds == (grid.seed,)
    assert grid.seeded_runs and not [t for s in wf.TARGET_STAGES for t in grid.targets(s) if "/seed" in t]
    assert "train_seeds" not in {a.split("=")[0] for a in wf.tables_args(grid)}
    assert grid.constraint("seed") == "(?!)"  # the seed rules match nothing


@pytest.mark.parametrize("name", STUDY_PRESETS)
def test_the_study_presets_train_every_table_run_with_three_seeds(name: str) -> None:
    grid = wf.load_grid(name)
    assert grid.train_seeds == (0, 1, 2) and grid.seed == 0
    assert set(grid.seeded_runs) == set(grid.train_runs)  # every run behind a table has its seeds
    markers = grid.targets("train")
    for seed in (1, 2):
        assert all(grid.checkpoint_marker(run, seed) in markers for run in grid.train_runs)
    assert value(wf.tables_args(grid), "train_seeds") == "[0,1,2]"


# ---- refusals --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "seeds",
    [[0, 0], [], [0, "1"], [0, 1.5], [0, -1], [0, True], 1, None],
    ids=["repeat", "empty", "string", "float", "negative", "bool", "scalar", "null"],
)
def test_a_bad_seed_list_fails_the_schema_naming_the_key(seeds: Any) -> None:
    with pytest.raises(ValueError, match=r"grid\.train_seeds"):
        small(train_seeds=seeds)


@pytest.mark.parametrize(
    ("seeds", "why"),
    [
        ([0, 1, 0], r"grid\.train_seeds=\[0, 1, 0\] repeats \[0\]"),
        ([], r"grid\.train_seeds=\[\] names no seed"),
        (
            [0, 1.0],
            r"grid\.train_seeds\[1\]=1\.0 is not a non-negative int",
        ),  # the schema takes 1.0 as an integer
        ([0, "1"], r"grid\.train_seeds\[1\]='1' is not a non-negative int"),
        ([1, 2], r"grid\.train_seeds=\[1, 2\] lacks grid\.seed=0"),
    ],
)
def test_the_grid_refuses_a_bad_seed_list_naming_the_key_and_the_fix(seeds: list[Any], why: str) -> None:
    raw = copy.deepcopy(wf.load_yaml(wf.CONF_DIR / "experiment" / "tiny.yaml")["grid"])
    with pytest.raises(ValueError, match=why) as error:
        wf.Grid("tiny", {**raw, "train_seeds": seeds})
    assert "grid.seed" in str(error.value)  # the fix: how the list must look


@pytest.mark.parametrize("override", ["train_seeds=[0,1]", "+train_seeds=[0,1]", "++train_seeds=null"])
def test_tables_overrides_may_not_ask_for_seeds_the_grid_does_not_train(override: str) -> None:
    raw = copy.deepcopy(wf.load_yaml(wf.CONF_DIR / "experiment" / "tiny.yaml")["grid"])
    with pytest.raises(ValueError, match=r"set grid\.train_seeds instead"):
        wf.Grid("tiny", raw, {"tables": [override]})
    with pytest.raises(ValueError, match=r"set grid\.train_seeds instead"):
        wf.Grid("tiny", {**raw, "overrides": {**raw["overrides"], "tables": [override]}})


# ---- the Snakefile ---------------------------------------------------------------------------------------
def dry_run(workdir: Path, config: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """Returns ``snakemake -n -p all_tables`` of ``config`` (written as a --configfile) on an empty workdir."""
    configfile = workdir / "seeds.yaml"
    configfile.write_text(yaml.safe_dump(config))
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(wf.REPO_DIR / "Snakefile"),
        "--directory",
        str(workdir),
        "--workflow-profile",
        "none",
        "-n",
        "-p",
        "all_tables",
        "--configfile",
        str(configfile),
    ]
    return subprocess.run(cmd, cwd=wf.REPO_DIR, capture_output=True, text=True, timeout=300)


def job_counts(run: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """Returns rule -> job count from a dry run's "Job stats" table."""
    table = run.stdout.split("Job stats:")[1].split("total")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.MULTILINE)}


def test_a_dry_run_lists_each_seeds_training_and_evaluations(tmp_path: Path) -> None:
    # the whole tiny preset with a second seed: how a user pools seeds without editing the preset
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
    one = dry_run(tmp_path / "one", {"experiment": "tiny"})
    two = dry_run(tmp_path / "two", {"experiment": "tiny", "grid": {"train_seeds": [0, 1]}})
    assert one.returncode == 0 and two.returncode == 0, two.stderr + two.stdout
    grid = wf.load_grid("tiny", {"train_seeds": [0, 1]})
    seeded = {"train_seed": len(grid.seeded_runs), "evaluate_trained_seed": len(grid.seeded_cells)}
    assert seeded == {"train_seed": 5, "evaluate_trained_seed": 56}
    assert {k: v for k, v in job_counts(two).items() if k not in seeded} == job_counts(one)
    assert {k: job_counts(two)[k] for k in seeded} == seeded
    assert re.search(
        r"src/train\.py experiment=tiny model=tiny method=scopd .* seed=1 runs_root=runs/seed1 ", two.stdout
    )
    assert re.search(
        r"src/evaluate\.py .* seed=0 bench=syn_ocr \S+ checkpoint=runs/seed1/tiny/tiny/scopd/visionzip/0\.1/checkpoint "
        r"results_root=results/seed1 .*> logs/evaluate/seed1/tiny/tiny/scopd/random/0\.1/syn_ocr\.log",
        two.stdout,
    )
    assert re.search(r"src/make_tables\.py experiment=tiny 'train_seeds=\[0,1\]' ", two.stdout)
    assert re.search(r"src/make_tables\.py experiment=tiny > ", one.stdout)


def test_a_reduced_grid_that_make_tables_cannot_pool_is_refused_before_any_job(tmp_path: Path) -> None:
    # make_tables reads the preset's tables: dapo, epic, grpo and lt_opd would have no result for seed 1
    run = dry_run(tmp_path, {"experiment": "tiny", "grid": SMALL})
    output = run.stdout + run.stderr
    assert run.returncode != 0 and "Job stats" not in output
    assert "grid.train_seeds=[0, 1]: make_tables reads the tables of conf/experiment/tiny.yaml" in output
    assert "['dapo', 'epic', 'grpo', 'lt_opd']" in output
    wf.check_tables_seeds(small(train_seeds=[0]))  # one seed: make_tables gets no train_seeds, nothing to pool
    with pytest.raises(ValueError, match=r"grid\.train_seeds=\[0, 1\]: make_tables reads"):
        wf.check_tables_seeds(small())


def test_a_repeated_seed_stops_the_dry_run_naming_the_key(tmp_path: Path) -> None:
    run = dry_run(tmp_path, {"experiment": "tiny", "grid": {**SMALL, "train_seeds": [0, 1, 1]}})
    assert run.returncode != 0
    assert "config.grid.train_seeds: [0, 1, 1] has non-unique elements" in run.stderr + run.stdout
    assert "Job stats" not in run.stdout
