"""Grid expansion and missing-cell reporting of ``sparsectx.workflow`` (no Snakemake involved)."""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import pytest

from sparsectx import workflow as wf
from sparsectx.paths import leaf_dir, result_path, run_dir

PRESETS = sorted(p.stem for p in (wf.CONF_DIR / "experiment").glob("*.yaml"))


def tiny_raw() -> dict:
    """Returns a deep copy of the tiny preset's grid mapping."""
    return copy.deepcopy(wf.load_yaml(wf.CONF_DIR / "experiment" / "tiny.yaml")["grid"])


def build(grid: dict, experiment: str = "tiny") -> wf.Grid:
    """Returns the Grid of ``grid`` after the same schema check the Snakefile runs."""
    wf.validate_config({"experiment": experiment, "grid": grid, "hydra_overrides": {}})
    return wf.Grid(experiment, grid)


def test_the_three_presets_exist() -> None:
    assert {"tiny", "scopd_qwen2_5_vl_7b", "ltopd_qwen3_5_4b"} <= set(PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_loads_and_names_only_existing_configs(name: str) -> None:
    grid = wf.load_grid(name)
    assert grid.cells(), f"{name} schedules nothing"
    assert grid.unknown_conf_names() == []


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_starts_with_its_command_and_names_itself(name: str) -> None:
    path = wf.CONF_DIR / "experiment" / f"{name}.yaml"
    lines = path.read_text().splitlines()
    assert lines[0] == "# @package _global_"  # Hydra reads the header only before the first other line
    assert lines[1].startswith("# snakemake --profile ") and lines[1].endswith(f"all_tables --config experiment={name}")
    raw = wf.load_yaml(path)
    assert raw["experiment"] == raw["grid"]["name"] == name


def test_output_patterns_agree_with_sparsectx_paths() -> None:
    values = dict(experiment="e", model="m", method="scopd", pruner="visionzip", budget="0.1", bench="mme")
    leaf = leaf_dir("results", "e", "m", "scopd", "visionzip", 0.1)
    assert wf.RESULT_PATTERN.format(**values) == str(result_path(leaf, "mme"))
    assert wf.PASSK_PATTERN.format(**values) == str(leaf / "mme.passk.json")
    assert wf.EFFICIENCY_PATTERN.format(**values) == str(leaf.parent / "efficiency.json")
    run = run_dir("runs", "e", "m", "scopd", "visionzip", 0.1)
    assert wf.CHECKPOINT_PATTERN.format(**values) == str(run / "checkpoint" / wf.CHECKPOINT_MARKER)


def test_tiny_cells_include_the_reference_and_every_row_product() -> None:
    grid = wf.load_grid("tiny")
    sweep = next(b for b in grid.blocks if b.name == "sweep")
    cells = grid.block_cells(sweep)
    assert len(cells) == len(sweep.benchmarks) * (1 + 8 * 3)  # benchmarks x (reference + pruners x budgets)
    assert wf.Cell("tiny", "base", "visionzip", 1.0, "syn_pope") in cells
    assert wf.Cell("tiny", "base", "divprune", 0.05, "syn_count") in cells
    assert wf.Cell("tiny", "base", "dart", 0.05, "syn_ocr") in cells  # an in-LLM operator, at 5%


def test_tiny_training_runs_and_checkpoints() -> None:
    grid = wf.load_grid("tiny")
    assert sorted(grid.train_runs, key=lambda r: r.method) == [
        wf.TrainRun("tiny", "dapo", "visionzip", 0.1),
        wf.TrainRun("tiny", "epic", "visionzip", 0.1),
        wf.TrainRun("tiny", "grpo", "visionzip", 0.1),
        wf.TrainRun("tiny", "lt_opd", "cdpruner", 0.05),
        wf.TrainRun("tiny", "scopd", "visionzip", 0.1),
    ]
    cell = wf.Cell("tiny", "scopd", "random", 0.1, "syn_count")  # another pruner: same checkpoint
    assert grid.train_run(cell) == wf.TrainRun("tiny", "scopd", "visionzip", 0.1)
    assert grid.checkpoint_inputs(cell) == ["runs/tiny/tiny/scopd/visionzip/0.1/checkpoint/config.json"]
    assert grid.checkpoint_inputs(wf.Cell("tiny", "base", "random", 0.1, "syn_count")) == []


def test_every_tiny_cell_is_scheduled() -> None:
    # All eight operators run on the tiny model; footnoted cells are checked on the LT-OPD grid below.
    assert wf.missing_cells("tiny") == []
    generalization = next(b for b in wf.load_grid("tiny").blocks if b.name == "pruner_generalization")
    assert {"fastv", "dart", "hiprune"} <= set(generalization.rows[0].pruners)


def test_ltopd_reports_every_unsupported_part_of_a_cell() -> None:
    missing = wf.missing_cells("ltopd_qwen3_5_4b")
    by_cell = {(m.block, m.cell): m.reason for m in missing}
    reason = by_cell[("main", wf.Cell("qwen3_5_4b", "llava_mini", "cdpruner", 0.05, "mme"))]
    assert reason.startswith("method llava_mini: LLaVA-Mini")  # the qwen3_5 adapter runs Qwen3.5 itself
    fastv = by_cell[("main", wf.Cell("qwen3_5_4b", "base", "fastv", 0.05, "mme"))]
    assert fastv == (
        "pruner fastv on qwen3_5_4b: in-LLM pruning is refused on Qwen3.5: most of its layers "
        "(K-1 = 1 too) are linear attention"
    )
    assert wf.Cell("qwen3_vl_4b", "base", "dart", 0.05, "mme") in set(wf.load_grid("ltopd_qwen3_5_4b").cells())
    assert all(m.cell.model != "qwen3_vl_4b" or m.reason for m in missing)
    grid = wf.load_grid("ltopd_qwen3_5_4b")
    assert {"qwen3_5_4b", "qwen3_5_9b", "qwen3_vl_4b"} <= {c.model for c in grid.cells()}
    assert wf.Cell("qwen3_5_4b", "base", "cdpruner", 0.05, "mme") in grid.cells()
    assert not [c for c in grid.cells() if c.model.startswith("qwen3_5") and c.pruner in ("fastv", "dart")]
    assert {r.method for r in grid.train_runs} == {
        "sft",
        "lt_opd",
        "lt_opd_no_curriculum",
        "kd_fixed_prefix",
        "lt_opd_no_hold",
        "sft_curriculum",
        "lt_opd_teacher_ema",
        "lt_opd_teacher_trust_region",
        "lt_opd_teacher_progressive",
        "lt_opd_div_forward",
        "lt_opd_div_reverse",
        "grpo",
        "gspo",
        "dapo",
        "epic",
    }


def test_every_declared_unsupported_entry_shows_up_as_missing() -> None:
    for name in PRESETS:
        raw = wf.load_yaml(wf.CONF_DIR / "experiment" / f"{name}.yaml")["grid"]
        reasons = {
            spec["unsupported"]
            for section in ("models", "pruners", "benchmarks", "methods")
            for spec in raw[section].values()
            if spec and "unsupported" in spec
        }
        reported = " | ".join(m.reason for m in wf.missing_cells(name))
        assert all(r in reported for r in reasons), name


def test_scopd_grid_shapes() -> None:
    grid = wf.load_grid("scopd_qwen2_5_vl_7b")
    main = next(b for b in grid.blocks if b.name == "main")
    assert len(main.benchmarks) == 13
    assert {c.budget for c in grid.cells("table") if c.method == "scopd"} == {1.0, 0.2, 0.1, 0.05}
    assert {r.budget for r in grid.train_runs} == {0.1}  # trained at 10 %, evaluated across budgets
    assert grid.leaves("passk")[0].endswith(".passk.json")
    assert grid.efficiency_runs == []


def test_efficiency_runs_group_budgets_per_model_method_pruner() -> None:
    grid = wf.load_grid("tiny")
    assert grid.efficiency_runs == [
        wf.EfficiencyRun("tiny", "base", "cdpruner", (0.05, 0.1, 0.2), "syn_pope"),
        wf.EfficiencyRun("tiny", "base", "visionzip", (0.05, 0.1, 0.2), "syn_pope"),
        wf.EfficiencyRun("tiny", "lt_opd", "cdpruner", (0.05,), "syn_pope"),
    ]
    args = wf.efficiency_args(grid, grid.efficiency_run("tiny", "lt_opd", "cdpruner"))
    assert "mode=efficiency" in args and "efficiency.budgets=[0.05]" in args and "efficiency.bench=syn_pope" in args
    assert "checkpoint=runs/tiny/tiny/lt_opd/cdpruner/0.05/checkpoint" in args
    assert grid.targets("efficiency") == [
        "results/tiny/tiny/base/cdpruner/efficiency.json",
        "results/tiny/tiny/base/visionzip/efficiency.json",
        "results/tiny/tiny/lt_opd/cdpruner/efficiency.json",
    ]


def test_stage_targets_partition_the_table_leaves() -> None:
    grid = wf.load_grid("tiny")
    stages = [grid.targets(s) for s in ("full_context", "sweep", "trained")]
    assert sorted(sum(stages, [])) == grid.leaves("table")
    references = [f"results/tiny/tiny/base/visionzip/1/{b}.json" for b in sorted(grid.benchmarks)]
    assert grid.targets("full_context") == references
    assert all("/base/" not in leaf for leaf in grid.targets("trained"))


def test_cli_overrides_name_the_leaf_and_append_the_grid_then_the_config() -> None:
    grid = wf.Grid("tiny", tiny_raw(), {"evaluate": ["batch_size=2"], "passk": ["passk.n=2"]})
    cell = wf.Cell("tiny", "scopd", "visionzip", 1.0, "syn_count")
    assert wf.evaluate_args(grid, cell) == [
        "experiment=tiny",
        "model=tiny",
        "method=scopd",
        "pruner=visionzip",
        "budget=1",
        "seed=0",
        "bench=syn_count",
        f"bench.syn_count.path={grid.data_dir()}/syn_count.tsv",
        "checkpoint=runs/tiny/tiny/scopd/visionzip/0.1/checkpoint",
        "logger=none",
        "batch_size=2",
    ]
    passk = wf.evaluate_args(grid, wf.Cell("tiny", "base", "visionzip", 0.1, "syn_count"), mode="passk")
    assert "passk.full_context_leaf=results/tiny/tiny/base/visionzip/1" in passk and passk[-1] == "passk.n=2"
    train = wf.train_args(grid, wf.TrainRun("tiny", "lt_opd", "cdpruner", 0.05))
    assert train[:6] == [
        "experiment=tiny",
        "model=tiny",
        "method=lt_opd",
        "pruner=cdpruner",
        "budget=0.05",
        "seed=0",
    ]
    method_overrides = tiny_raw()["methods"]["lt_opd"]["overrides"]
    assert "steps=40" in train and train[-len(method_overrides) :] == method_overrides  # stage's, then method's


def test_a_models_train_overrides_come_last_in_its_training_jobs_only() -> None:
    raw = tiny_raw()
    raw["models"]["tiny"] = {"overrides": ["model.thinking=false"], "train_overrides": ["method.train_vision=false"]}
    grid = build(raw)
    train = wf.train_args(grid, wf.TrainRun("tiny", "lt_opd", "cdpruner", 0.05))
    assert train[-1] == "method.train_vision=false" and "model.thinking=false" in train
    evaluate = wf.evaluate_args(grid, wf.Cell("tiny", "lt_opd", "cdpruner", 0.05, "syn_count"))
    assert "model.thinking=false" in evaluate and "method.train_vision=false" not in evaluate
    raw["models"]["tiny"]["train_overrides"] = "method.train_vision=false"  # a string, not a list
    with pytest.raises(ValueError, match="train_overrides"):
        build(raw)


def test_the_ltopd_preset_shards_its_trainings_and_freezes_the_llava_tower() -> None:
    """LT-OPD's full-parameter runs shard over the job's GPUs with activations recomputed (replicated they do not
    fit 80 GB: tests/plan), and the LLaVA-OneVision stand-in trains the language model only (its family refuses
    method.train_vision)."""
    grid = wf.Grid("ltopd_qwen3_5_4b", wf.load_yaml(wf.CONF_DIR / "experiment" / "ltopd_qwen3_5_4b.yaml")["grid"])
    for run in grid.train_runs:
        assert {"distributed.strategy=fsdp", "memory.activation_checkpointing=true"} <= set(wf.train_args(grid, run))
    (run,) = [r for r in grid.train_runs if r.model == "llava_onevision_qwen2_7b"]
    assert wf.train_args(grid, run)[-1] == "method.train_vision=false"
    assert all(
        "train_vision" not in a for r in grid.train_runs if r.model == "qwen3_5_4b" for a in wf.train_args(grid, r)
    )


def test_train_command_launches_torchrun_only_for_several_gpus() -> None:
    raw = tiny_raw()
    assert wf.train_command(build(raw))[1].endswith("src/train.py")
    raw["resources"]["train"]["gpu"] = 4
    launch = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "${SLURM_GPUS_ON_NODE:-4}"]
    assert wf.train_command(build(raw))[1:6] == launch  # the allocation's GPUs under SLURM, else the request


def test_entry_point_is_relative_to_the_working_directory(tmp_path: Path) -> None:
    python, script = wf.entry_point("evaluate.py", cwd=wf.REPO_DIR)
    assert script == "src/evaluate.py"
    assert Path(wf.REPO_DIR, python).resolve() == Path(sys.executable).resolve()
    _, elsewhere = wf.entry_point("evaluate.py", cwd=tmp_path)
    assert Path(tmp_path, elsewhere).resolve() == wf.REPO_DIR / "src" / "evaluate.py"
    assert not os.path.isabs(elsewhere)


def test_wildcard_constraints_cover_exactly_the_scheduled_names() -> None:
    grid = wf.load_grid("tiny")
    assert grid.names("pruner") == [
        "cdpruner",
        "dart",
        "divprune",
        "fastv",
        "hiprune",
        "random",
        "visionzip",
        "zoo_prune",
    ]
    assert grid.names("method") == ["base", "dapo", "epic", "grpo", "lt_opd", "scopd"]
    assert grid.names("budget") == ["0.05", "0.1", "0.2", "1"]
    assert grid.constraint("method", exclude=["base"]) == "dapo|epic|grpo|lt_opd|scopd"
    assert grid.constraint("budget") == r"0\.05|0\.1|0\.2|1"


def test_mirror_moves_outputs_under_logs_and_benchmarks() -> None:
    assert wf.mirror(wf.RESULT_PATTERN, "logs", "evaluate", ".log") == (
        "logs/evaluate/{experiment}/{model}/{method}/{pruner}/{budget}/{bench}.log"
    )
    assert wf.mirror(wf.CHECKPOINT_PATTERN, "benchmarks", "train", ".tsv") == (
        "benchmarks/train/{experiment}/{model}/{method}/{pruner}/{budget}.tsv"
    )
    assert wf.mirror(wf.PASSK_PATTERN, "logs", "passk", ".log").endswith("/{budget}/{bench}.log")


def test_tiny_data_files_come_from_the_data_config() -> None:
    grid = wf.load_grid("tiny")
    files = grid.data_files()
    data = wf.load_yaml(wf.CONF_DIR / "data" / "tiny.yaml")
    # the pipeline's own folder, never data/tiny/ (what a hand-run build_data.py writes: issue 13, finding 6)
    assert grid.data_dir().startswith(f"{data['out_dir']}-")
    assert files["train"] == f"{grid.data_dir()}/train.tsv"
    assert set(files) == set(data["benches"]) | {"train"}
    assert wf.data_args(grid, "build_data") == wf.data_args(grid, "train") == [f"data.out_dir={grid.data_dir()}"]
    assert wf.load_grid("scopd_qwen2_5_vl_7b").data_files() == {}


def test_a_video_family_is_built_by_the_data_job_beside_the_suite() -> None:
    grid, image_only = wf.load_grid("tiny_video"), wf.load_grid("tiny")
    files = grid.data_files()
    data = wf.load_yaml(wf.CONF_DIR / "data" / "tiny.yaml")
    assert set(files) == set(data["benches"]) | {"train", "tiny_video"}
    assert files["tiny_video"] == f"{grid.data_dir()}/tiny_video.tsv"
    assert wf.data_args(grid, "train") == [f"data.out_dir={grid.data_dir()}"]
    assert wf.data_args(grid, "build_data") == [f"data.out_dir={grid.data_dir()}", "data/video=tiny_video"]
    assert wf.data_args(grid, "evaluate", "tiny_video") == [f"bench.tiny_video.path={files['tiny_video']}"]
    # the video family's config is part of the digest only when given: image-only grids keep their folder
    digest = lambda g: g.data_dir().rsplit("-", 1)[1]  # noqa: E731
    assert digest(grid) != digest(image_only)


def test_an_unknown_video_family_names_the_key() -> None:
    with pytest.raises(ValueError, match=r"grid.data.video='tiny_vdeo': no conf/data/video/tiny_vdeo.yaml"):
        wf.load_grid("tiny_video", {"data": {"build": True, "config": "tiny", "video": "tiny_vdeo"}})


def test_config_grid_keys_replace_preset_keys_whole() -> None:
    reduced = {
        "benchmarks": {"syn_count": {}},
        "methods": {},
        "pruners": {"visionzip": {}},
        "tables": {
            "only": {
                "models": ["tiny"],
                "benchmarks": ["syn_count"],
                "rows": [{"methods": ["base"], "pruners": ["visionzip"], "budgets": [0.1]}],
            }
        },
        "passk": None,
        "efficiency": None,
    }
    grid = wf.load_grid("tiny", reduced)
    assert [b.name for b in grid.blocks] == ["only"]
    assert grid.leaves("table") == [
        "results/tiny/tiny/base/visionzip/0.1/syn_count.json",
        "results/tiny/tiny/base/visionzip/1/syn_count.json",
    ]
    assert grid.missing_cells() == [] and grid.train_runs == []


def test_unknown_experiment_lists_the_presets() -> None:
    with pytest.raises(ValueError, match="available: .*tiny"):
        wf.load_grid("tinny")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda g: g["tables"]["sweep"]["rows"][0]["pruners"].append("visonzip"), "grid.pruners lacks them"),
        (lambda g: g["pruners"].update(random_2={}), r"declares \['random_2'\] but no block uses them"),
        (lambda g: g["tables"]["sweep"]["rows"][0]["budgets"].append(1.0), "budget 1.0 keeps every token"),
        (lambda g: g["methods"]["scopd"].update(budgets=[0.1, 0.2]), "would not say which checkpoint"),
        (
            lambda g: g["pruners"]["visionzip"].update(unsupported="not in this study"),
            "reference_pruner='visionzip' is declared unsupported",
        ),
        (lambda g: g.update(name="other"), "must equal the preset.s file stem"),
        (lambda g: g["methods"].update(base={"pruner": "visionzip", "budgets": [0.1]}), "is never declared"),
        (lambda g: g["efficiency"].update(benchmarks=["syn_pope", "syn_count"]), "name exactly one"),
        (lambda g: g["efficiency"]["rows"][0]["budgets"].append(1.0), "drop budget 1.0"),
    ],
)
def test_inconsistent_grids_fail_at_construction(edit, message: str) -> None:
    raw = tiny_raw()
    edit(raw)
    with pytest.raises(ValueError, match=message):
        build(raw)


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (
            lambda g: g["tables"]["main"]["rows"][0].update(budgets=[0.0]),
            "config.grid.tables.main.rows.0.budgets.0",
        ),
        (lambda g: g.update(typo_key=1), "config.grid"),
        (lambda g: g["resources"]["train"].pop("gpu"), "config.grid.resources.train"),
        (lambda g: g["pruners"].update(fastv={"unsupported": "no"}), "config.grid.pruners.fastv"),
        (lambda g: g["data"].pop("config"), "config.grid.data"),
    ],
)
def test_schema_errors_name_the_key(edit, key: str) -> None:
    raw = tiny_raw()
    edit(raw)
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        build(raw)


def test_method_trained_at_several_budgets_is_evaluated_at_each() -> None:
    raw = tiny_raw()
    raw["methods"]["scopd"]["budgets"] = [0.1, 0.2]
    raw["tables"]["main"]["rows"] = [{"methods": ["base", "scopd"], "pruners": ["visionzip"], "budgets": [0.2, 0.1]}]
    raw["tables"]["pruner_generalization"]["rows"][0]["methods"] = ["base"]
    grid = build(raw)
    assert [r for r in grid.train_runs if r.method == "scopd"] == [
        wf.TrainRun("tiny", "scopd", "visionzip", 0.1),
        wf.TrainRun("tiny", "scopd", "visionzip", 0.2),
    ]
    assert grid.train_run(wf.Cell("tiny", "scopd", "visionzip", 0.2, "syn_pope")).budget == 0.2


def test_method_overrides_follow_the_train_stage_overrides_for_that_method_only() -> None:
    raw = tiny_raw()
    raw["methods"]["scopd"]["overrides"] = ["method.optim.lr=5e-4"]
    raw["methods"]["lt_opd"].pop("overrides", None)
    grid = wf.Grid("tiny", raw)
    scopd = wf.train_args(grid, wf.TrainRun("tiny", "scopd", "visionzip", 0.1))
    assert scopd[-1] == "method.optim.lr=5e-4"
    assert scopd.index("method.optim.lr=5e-4") > max(scopd.index(o) for o in grid.overrides("train"))
    assert "method.optim.lr=5e-4" not in wf.train_args(grid, wf.TrainRun("tiny", "lt_opd", "cdpruner", 0.05))


def test_an_unknown_eval_jobs_value_names_the_key() -> None:
    raw = tiny_raw()
    raw["eval_jobs"] = "suite"
    with pytest.raises(ValueError, match=r"grid\.eval_jobs"):
        build(raw)


def test_evaluation_jobs_with_several_gpus_start_one_shard_per_gpu() -> None:
    raw = tiny_raw()
    cell = wf.Cell("tiny", "base", "visionzip", 0.1, "syn_count")
    one = build(copy.deepcopy(raw))
    assert wf.evaluate_command(one)[-1].endswith("src/evaluate.py") and len(wf.evaluate_command(one)) == 2
    assert not any(a.startswith("shard.") for a in wf.evaluate_args(one, cell))
    raw["resources"]["evaluate"]["gpu"] = 2
    two = build(raw)
    launch = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "${SLURM_GPUS_ON_NODE:-2}"]
    assert wf.evaluate_command(two)[1:-1] == launch
    assert "shard.from_env=torchrun" in wf.evaluate_args(two, cell)
    # Pass@K is not sharded (its rule keeps the plain entry point)
    assert not any(a.startswith("shard.") for a in wf.evaluate_args(two, cell, mode="passk"))
