"""Method variants (a grid method composing another preset with overrides) and sweep blocks (SCOPD Fig. 3).

A variant trains and evaluates as ``method=<preset> method.name=<variant>``: its runs and results carry its own
name, its composed training config differs from its preset's by the overrides alone, and its checkpoint's record
names it. A sweep block is a table block of its points, checked against each point's composed training config.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from sparsectx import workflow as wf
from sparsectx.eval.trained import RUN_CONFIG, leaf_method
from sparsectx.paths import CHECKPOINT_INFO
from sparsectx.workflow.select import selected_blocks

VARIANT = "scopd_plus_rho_0_3"
RUN = wf.TrainRun("tiny", VARIANT, "visionzip", 0.1)
DEFAULT = wf.TrainRun("tiny", "scopd_plus", "visionzip", 0.1)


def raw_grid(experiment: str = "tiny_scopd") -> dict[str, Any]:
    """Returns a deep copy of a preset's grid mapping."""
    return copy.deepcopy(wf.load_yaml(wf.CONF_DIR / "experiment" / f"{experiment}.yaml")["grid"])


def build(grid: dict[str, Any], experiment: str = "tiny_scopd") -> wf.Grid:
    """Returns the Grid of ``grid`` after the Snakefile's schema check."""
    wf.validate_config({"experiment": experiment, "grid": grid, "hydra_overrides": {}})
    return wf.Grid(experiment, grid)


def flat(cfg: Any, prefix: str = "") -> dict[str, Any]:
    """Returns a composed config as dotted key -> leaf value."""
    if not isinstance(cfg, dict):
        return {prefix.removesuffix("."): cfg}
    return {k: v for key, node in cfg.items() for k, v in flat(node, f"{prefix}{key}.").items()}


def composed(name: str, overrides: list[str]) -> dict[str, Any]:
    """Returns ``conf/<name>.yaml`` composed with ``overrides``, flattened (unresolved interpolations kept)."""
    with initialize_config_dir(version_base=None, config_dir=str(wf.CONF_DIR)):
        cfg = compose(name, overrides=overrides)
    return flat(OmegaConf.to_container(cfg, resolve=False))


def test_a_variant_trains_as_its_preset_under_its_own_name() -> None:
    grid = wf.load_grid("tiny_scopd")
    assert grid.methods[VARIANT].preset == "scopd_plus" and grid.methods[VARIANT].variant
    assert not grid.methods["scopd_plus"].variant
    variant, default = wf.train_args(grid, RUN), wf.train_args(grid, DEFAULT)
    assert variant[:4] == ["experiment=tiny_scopd", "model=tiny", "method=scopd_plus", f"method.name={VARIANT}"]
    assert set(variant) - set(default) == {f"method.name={VARIANT}", "method.positions.fraction=0.3"}
    assert set(default) <= set(variant)
    assert grid.checkpoint_dir(RUN) == f"runs/tiny_scopd/tiny/{VARIANT}/visionzip/0.1/checkpoint"
    assert grid.checkpoint_dir(RUN, 1) == f"runs/seed1/tiny_scopd/tiny/{VARIANT}/visionzip/0.1/checkpoint"
    assert not (wf.CONF_DIR / "method" / f"{VARIANT}.yaml").exists() and not grid.unknown_conf_names()


def test_the_variant_training_config_differs_from_its_preset_by_the_overrides_only() -> None:
    grid = wf.load_grid("tiny_scopd")
    variant = composed("train", wf.train_args(grid, RUN))
    default = composed("train", wf.train_args(grid, DEFAULT))
    differ = {k for k in variant.keys() | default.keys() if variant.get(k) != default.get(k)}
    assert differ == {"method.name", "method.positions.fraction"}
    assert (variant["method.name"], variant["method.positions.fraction"]) == (VARIANT, 0.3)
    assert default["method.positions.fraction"] == 0.1  # the preset's own value, untouched


def test_a_variant_is_evaluated_from_its_checkpoint_into_its_own_leaf(tmp_path: Path) -> None:
    grid = wf.load_grid("tiny_scopd")
    cell = wf.Cell("tiny", VARIANT, "visionzip", 0.1, "syn_count")
    args = wf.evaluate_args(grid, cell)
    assert "method=scopd_plus" in args and f"method.name={VARIANT}" in args
    assert f"checkpoint=runs/tiny_scopd/tiny/{VARIANT}/visionzip/0.1/checkpoint" in args
    assert grid.leaf(cell) == f"results/tiny_scopd/tiny/{VARIANT}/visionzip/0.1/syn_count.json"
    assert grid.leaf(cell, seed=2) == f"results/seed2/tiny_scopd/tiny/{VARIANT}/visionzip/0.1/syn_count.json"
    assert composed("evaluate", args)["method.name"] == VARIANT
    # the trained checkpoint records the variant (train.py writes the composed method.name into config.yaml)
    checkpoint = tmp_path / "run" / "checkpoint"
    checkpoint.mkdir(parents=True)
    (checkpoint / CHECKPOINT_INFO).write_text(json.dumps({"config_hash": "0" * 16, "steps": 40}))
    trained = composed("train", wf.train_args(grid, RUN))
    (checkpoint.parent / RUN_CONFIG).write_text(json.dumps({"method": {"name": trained["method.name"]}}))
    assert leaf_method(VARIANT, checkpoint) == VARIANT
    with pytest.raises(ValueError, match="conflicts with"):  # the preset's name would not be this checkpoint's
        leaf_method("scopd_plus", checkpoint)


@pytest.mark.parametrize(
    ("preset", "message"),
    [
        (
            "scopd_pluss",
            r"grid\.methods\.scopd_plus_rho_0_3\.preset='scopd_pluss': no .*scopd_pluss\.yaml; "
            r"choose one of \[.*'scopd_plus'",
        ),
        (None, "preset"),
    ],
)
def test_an_unknown_preset_names_the_key_the_file_and_the_choices(preset: str | None, message: str) -> None:
    raw = raw_grid()
    if preset is None:  # schema: a preset must be a name
        raw["methods"][VARIANT]["preset"] = "Scopd Plus"
        with pytest.raises(ValueError, match=r"config\.grid\.methods\.scopd_plus_rho_0_3\.preset"):
            build(raw)
        return
    raw["methods"][VARIANT]["preset"] = preset
    with pytest.raises(ValueError, match=message):
        build(raw)


def test_a_variant_may_not_take_the_name_of_another_preset() -> None:
    raw = raw_grid()
    raw["methods"]["scopd_plus_select_tip"]["preset"] = "scopd_plus"
    with pytest.raises(ValueError, match=r"scopd_plus_select_tip.* is itself the preset"):
        build(raw)


def test_a_sweep_is_a_table_block_of_its_points_the_untrained_row_and_its_reference() -> None:
    grid = wf.load_grid("tiny_scopd")
    sweep = grid.sweeps["rho_sensitivity"]
    assert [(p.value, p.method) for p in sweep.points] == [(0.1, "scopd_plus"), (0.3, VARIANT)]
    assert (sweep.key, sweep.pruner, sweep.budget, sweep.reference) == (
        "method.positions.fraction",
        "visionzip",
        0.1,
        "base",
    )
    (block,) = [b for b in grid.blocks if b.name == "rho_sensitivity"]
    assert block.kind == "table"
    rows = {(c.method, c.pruner, c.budget) for c in grid.block_cells(block)}
    assert rows == {
        ("base", "visionzip", 1.0),
        ("base", "visionzip", 0.1),
        ("scopd_plus", "visionzip", 0.1),
        (VARIANT, "visionzip", 0.1),
    }
    trained = set(grid.targets("trained"))
    assert f"results/seed1/tiny_scopd/tiny/{VARIANT}/visionzip/0.1/syn_mcq.json" in trained  # seeds pool it
    assert grid.checkpoint_marker(RUN, 2) in grid.targets("train")


def test_a_trained_reference_adds_its_full_context_row() -> None:
    raw = raw_grid()
    raw["tables"]["rho_sensitivity"]["reference"] = "scopd"
    grid = build(raw)
    (block,) = [b for b in grid.blocks if b.name == "rho_sensitivity"]
    assert wf.Cell("tiny", "scopd", "visionzip", 1.0, "syn_count") in grid.block_cells(block)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s["points"][1].update(value=0.1), r"rho_sensitivity\.points repeat the values \[0\.1\]"),
        (lambda s: s["points"][1].update(method="scopd_plus"), r"repeat the methods \['scopd_plus'\]"),
        (lambda s: s["points"][1].update(method="base"), "the untrained model"),
        (lambda s: s["points"][1].update(method="scopd_plus_rho_0_5"), r"grid\.methods lacks them"),
        (lambda s: s["parameter"].pop("key"), r"config\.grid\.tables\.rho_sensitivity\.parameter"),
        (lambda s: s.update(points=s["points"][:1]), r"config\.grid\.tables\.rho_sensitivity\.points"),
        (lambda s: s.update(rows=[]), r"config\.grid\.tables\.rho_sensitivity"),
    ],
)
def test_an_inconsistent_sweep_names_its_key(edit, message: str) -> None:
    raw = raw_grid()
    edit(raw["tables"]["rho_sensitivity"])
    with pytest.raises(ValueError, match=message):
        build(raw)


def test_sweep_values_are_checked_against_each_points_composed_training_config() -> None:
    wf.check_sweep_values(wf.load_grid("tiny_scopd"))
    raw = raw_grid()
    raw["tables"]["rho_sensitivity"]["points"][1]["value"] = 0.5  # the variant trains at 0.3
    with pytest.raises(
        ValueError,
        match=r"rho_sensitivity: point 50% \(scopd_plus_rho_0_3, tiny\) trains with "
        r"method\.positions\.fraction=0\.3, not 0\.5",
    ):
        wf.check_sweep_values(build(raw))
    raw = raw_grid()
    raw["tables"]["delta_sensitivity"]["points"][0]["value"] = 0.02  # scopd_plus's own delta is 1%
    with pytest.raises(ValueError, match=r"method\.positions\.delta=0\.01, not 0\.02"):
        wf.check_sweep_values(build(raw))


def test_a_selected_sweep_keeps_what_its_rows_use() -> None:
    picked = selected_blocks(raw_grid(), ["delta_sensitivity"])
    assert set(picked["methods"]) == {"scopd_plus", "scopd_plus_delta_0_05"}
    grid = build(picked)
    assert set(grid.sweeps) == {"delta_sensitivity"}
    assert {r.method for r in grid.train_runs} == {"scopd_plus", "scopd_plus_delta_0_05"}


def test_dry_run_of_the_tiny_scopd_study_lists_the_sweep_jobs(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(wf.REPO_DIR / "Snakefile"),
        "--directory",
        str(tmp_path),
        "-n",
        "--workflow-profile",
        "none",
        "all_tables",
        "--config",
        "experiment=tiny_scopd",
    ]
    run = subprocess.run(cmd, cwd=wf.REPO_DIR, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr + run.stdout
    for variant in (VARIANT, "scopd_plus_delta_0_05"):
        for seed_root in ("", "seed1/", "seed2/"):
            marker = f"runs/{seed_root}tiny_scopd/tiny/{variant}/visionzip/0.1/checkpoint/config.json"
            assert f"output: {marker}" in run.stdout, marker
            leaf = f"results/{seed_root}tiny_scopd/tiny/{variant}/visionzip/0.1/syn_count.json"
            assert leaf in run.stdout, leaf
    assert f"method={VARIANT}" in run.stdout  # the job's wildcards name the variant
