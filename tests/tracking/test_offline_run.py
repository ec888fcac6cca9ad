"""The offline W&B runs of a tiny training and evaluation hold what the issue lists (issue 14, item 8).

Read back from the runs' ``.wandb`` transaction logs (``wandb.proto`` records) and their table artifacts:
both runs in the experiment's group with consistent job types and tags; training curves at every step; a
``rollouts`` table of several rows per logged step with the image, question, student answer, the teacher's
full-context greedy answer, reference, correctness and kept tokens; the checkpoint as a model artifact; the
evaluation's summary metrics and per-item predictions table (with images) all on step 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import wandb
from eval.test_runner_support import SIDE, base_overrides, build_model_dir, compose_eval, write_bench
from training.test_loop_support import build_env, compose_train, train_overrides

from sparsectx.eval.runner import run as evaluate
from sparsectx.training import loop

from .wandb_records import artifact_table, artifacts, history, run_info, table

WANDB = ["logger=wandb", "logger.mode=offline"]


@pytest.fixture(scope="module")
def offline_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Returns {job type: offline run directory} after a 2-step training and a 3-item evaluation."""
    root = tmp_path_factory.mktemp("wandb-runs")
    with pytest.MonkeyPatch.context() as env:
        for name in ("WANDB_MODE", "SPARSECTX_WANDB_DIR"):
            env.delenv(name, raising=False)
        env.setenv("WANDB_SILENT", "true")
        env.setenv("WANDB_DATA_DIR", str(root / "wandb-data"))  # offline artifacts wait here for `wandb sync`
        env.setenv("WANDB_CACHE_DIR", str(root / "wandb-cache"))
        tiny = build_env(root)
        train = [
            *train_overrides(tiny, root / "runs"),
            *WANDB,
            f"logger.dir={root}",
            "logger.log_checkpoints=true",
        ]
        loop.run(compose_train([*train, "method=scopd_plus", "logger.rollout_rows=2"]))
        model = build_model_dir(root / "eval-model", "qwen2_5_vl", weights=True)
        bench = {"syn_count": write_bench(root / "syn_count.tsv", "syn_count", 3, SIDE)}
        overrides = [*base_overrides(model, root / "results", bench, 4), *WANDB, f"logger.dir={root}"]
        evaluate(compose_eval(["bench=syn_count", "budget=0.25", *overrides]))
    # finish() hands the records to W&B's service process, which writes the .wandb logs when it gets to them
    # (under load, after finish() has returned); teardown waits for it, as a process exit does.
    wandb.teardown()
    runs = {run_info(d).job_type: d for d in (root / "wandb").glob("offline-run-*")}
    assert sorted(runs) == ["evaluate", "train"]
    return runs


def test_runs_share_the_experiment_group_and_tag_alike(offline_runs: dict[str, Path]) -> None:
    train, ev = run_info(offline_runs["train"]), run_info(offline_runs["evaluate"])
    assert train.run_group == ev.run_group == "dev"
    assert {"experiment:dev", "job:train", "model:tiny", "method:scopd_plus", "pruner:visionzip"} <= set(train.tags)
    assert {
        "experiment:dev",
        "job:evaluate",
        "model:tiny",
        "method:base",
        "budget:0.25",
        "mode:greedy",
    } <= set(ev.tags)


def test_training_logs_curves_a_rollout_table_per_step_and_the_checkpoint(
    offline_runs: dict[str, Path],
) -> None:
    run_dir = offline_runs["train"]
    rows = history(run_dir)
    assert [r["_step"] for r in rows] == [1, 2] and all("train/loss" in r for r in rows)
    for row in rows:
        full, media = artifact_table(run_dir, row["rollouts"])
        assert len(full["data"]) == 2  # logger.rollout_rows per logged step
        record = dict(zip(full["columns"], full["data"][0], strict=True))
        assert record["step"] == row["_step"] and record["question"] and record["reference"]
        assert record["student_answer"] and record["teacher_full_answer"]
        assert isinstance(record["student_correct"], bool) and isinstance(record["teacher_correct"], bool)
        assert 0 < record["kept_visual"] < record["visual_tokens"]
        assert record["image"]["_type"] == "image-file" and media[record["image"]["path"]].is_file()
    (model,) = [a for a in artifacts(run_dir) if a.type == "model"]
    assert model.name.startswith("dev-tiny-scopd_plus-visionzip-")
    assert "config.json" in {entry.path for entry in model.manifest.contents}


def test_evaluation_logs_summary_metrics_and_predictions_on_one_step(offline_runs: dict[str, Path]) -> None:
    run_dir = offline_runs["evaluate"]
    (row,) = history(run_dir)  # one step
    assert row["_step"] == 0 and row["syn_count/n_scored"] == 3 and "syn_count/score" in row
    assert table(run_dir, row["syn_count/predictions"])["columns"][:6] == [
        "image",
        "id",
        "question",
        "prediction",
        "answer",
        "correct",
    ]
    full, media = artifact_table(run_dir, row["syn_count/predictions"])
    assert len(full["data"]) == 3
    record = dict(zip(full["columns"], full["data"][0], strict=True))
    assert record["answer"] == "3" and isinstance(record["correct"], bool) and record["kept_visual"] > 0
    assert media[record["image"]["path"]].is_file()
