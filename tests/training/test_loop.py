"""The training loop: accumulation 1×4 == 4×1, the loadable checkpoint, NaN handling, tracking, and the
b = 1 alignment sanity check (spec §8)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from sparsectx.models import ModelConfig, load_model
from sparsectx.training import loop, steps
from sparsectx.training.samples import TABLE_COLUMNS
from sparsectx.training.steps import NonFiniteLossError
from sparsectx.training.update import accumulate_gradients

from .test_loop_support import FROZEN, TinyEnv, compose_train, make_trainer, shared_env, train_overrides


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


@pytest.mark.parametrize(
    "overrides",
    [
        ["method=scopd", *FROZEN],
        ["method=scopd_plus", "method.positions.delta=0.3", *FROZEN],
        ["method=sft"],
        ["method=lt_opd", "method.rollout.do_sample=false", "method.reduction=global_token_mean"],
    ],
    ids=["scopd", "scopd_plus", "sft", "lt_opd_global_token_mean"],
)
def test_accumulation_1x4_equals_4x1(overrides: list[str], tiny_env, tmp_path) -> None:  # noqa: ANN001
    one = make_trainer(tiny_env, tmp_path / "a", *overrides, "method.effective_batch_size=4", "micro_batch_size=4")
    four = make_trainer(tiny_env, tmp_path / "b", *overrides, "method.effective_batch_size=4", "micro_batch_size=1")
    assert (one.accum, four.accum) == (1, 4)
    stats_one, _, _ = accumulate_gradients(one)
    stats_four, _, _ = accumulate_gradients(four)
    assert stats_one["loss"] == pytest.approx(stats_four["loss"], rel=1e-5, abs=1e-9)
    assert stats_one["selected"] == stats_four["selected"] > 0
    for name, param in one.student.trainable.items():
        other = four.student.trainable[name].grad
        torch.testing.assert_close(param.grad, other, atol=1e-6, rtol=1e-4, msg=name)
    assert any(p.grad.abs().max() > 0 for p in one.student.trainable.values())


def test_checkpoint_is_the_merged_model_and_loads(tiny_env, tmp_path) -> None:  # noqa: ANN001
    result = loop.run(compose_train([*train_overrides(tiny_env, tmp_path), "method=scopd", "method.optim.lr=0.01"]))
    weights = load_file(str(result.checkpoint / "model.safetensors"))
    assert not any("lora" in key for key in weights)
    state = torch.load(result.run_dir / "state" / "trainer.pt", weights_only=False)
    base = load_file(str(tiny_env.model_dir / "model.safetensors"))
    key = "model.layers.0.self_attn.q_proj.weight"  # the checkpoint layout transformers writes for Qwen2.5-VL
    prefix = "model.language_model.layers.0.self_attn.q_proj"
    a, b = (
        state["trainable"][f"{prefix}.lora_A.default.weight"],
        state["trainable"][f"{prefix}.lora_B.default.weight"],
    )
    want = base[key] + (32 / 16) * b @ a  # W + (alpha / r) B A
    torch.testing.assert_close(weights[key], want, atol=1e-6, rtol=1e-6)
    assert not torch.allclose(weights[key], base[key])  # it trained
    loaded = load_model(
        ModelConfig("tiny", str(result.checkpoint), "float32", "cpu", "sdpa", 8, "grouped", 1, 64, "auto")
    )
    assert loaded.processor.tokenizer.convert_tokens_to_ids("<|image_pad|>") == loaded.adapter.image_token_id
    assert (result.run_dir / "config.yaml").is_file()


def test_non_finite_loss_stops_and_keeps_the_last_good_state(tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    calls = {"n": 0}
    real = steps._divergence

    def poisoned(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls["n"] += 1
        value = real(*args, **kwargs)
        return value * float("nan") if calls["n"] > 2 else value  # step 1 (2 micro-batches) is fine

    monkeypatch.setattr(steps, "_divergence", poisoned)
    cfg = compose_train([*train_overrides(tiny_env, tmp_path), "method=scopd", "steps=3"])
    with pytest.raises(
        NonFiniteLossError,
        match=r"step 1, micro-batch 0: loss=nan is not finite.*keeping the last good state",
    ):
        loop.run(cfg)
    run_dir = next(tmp_path.glob("*/*/*/*/*"))
    assert torch.load(run_dir / "state" / "trainer.pt", weights_only=False)["step"] == 1
    assert not (run_dir / "checkpoint").exists()


class RecordingTracker:
    """Keeps what the loop logs."""

    def __init__(self) -> None:
        self.metrics: list[tuple[int | None, dict[str, float]]] = []
        self.tables: list[tuple[str, list[str], list[list[Any]], int | None]] = []
        self.checkpoints: list[tuple[str, Path]] = []
        self.finished = False

    def log(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.metrics.append((step, dict(metrics)))

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]], step: int | None = None) -> None:
        self.tables.append((key, columns, rows, step))

    def log_checkpoint(self, name: str, path: Path, metadata: dict[str, Any]) -> None:
        self.checkpoints.append((name, Path(path)))

    def log_image(self, key: str, path: Any) -> None:
        pass

    def finish(self) -> None:
        self.finished = True


def test_tracking_logs_every_step_metric_and_sample_tables(tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    tracker = RecordingTracker()
    monkeypatch.setattr(loop, "start_run", lambda *args, **kwargs: tracker)
    loop.run(compose_train([*train_overrides(tiny_env, tmp_path), "method=scopd_plus", "method.positions.delta=0.3"]))
    assert [step for step, _ in tracker.metrics] == [1, 2] and tracker.finished
    expected = {
        "train/loss",
        "train/divergence",
        "train/selected_fraction",
        "train/sensitivity",
        "train/budget",
        "train/lr",
        "train/grad_norm",
        "train/kept_visual_fraction",
        "rollout/length",
        "rollout/stop_rate",
        "rollout/accuracy",
        "perf/samples_per_s",
        "perf/peak_memory_gb",
    }
    metrics = tracker.metrics[-1][1]
    assert expected <= set(metrics) and all(math.isfinite(v) for v in metrics.values())
    assert metrics["train/selected_fraction"] < 1.0 and metrics["train/sensitivity"] > 0.0
    key, columns, rows, step = tracker.tables[0]
    assert key == "rollouts" and columns == TABLE_COLUMNS and step == 1
    assert len(rows) == 2  # every sample of the step (2 micro-batches of 1), up to logger.rollout_rows
    row = dict(zip(columns, rows[0], strict=True))
    assert isinstance(row["image"], Image.Image) and row["teacher_full_answer"] and row["reference"]
    assert row["kept_visual"] < row["visual_tokens"]
    [(name, path)] = tracker.checkpoints
    assert "-tiny-scopd_plus-" in name and (path / "config.json").is_file()


def test_full_budget_self_teacher_gives_zero_loss(tiny_env, tmp_path) -> None:  # noqa: ANN001
    # Spec §8 alignment check: at b = 1 with teacher = student weights the per-token KL is exactly 0.
    result = loop.run(
        compose_train(
            [
                *train_overrides(tiny_env, tmp_path),
                "method=scopd",
                "pruner=random",
                "budget=1.0",
                "steps=1",
                "method.teacher.kind=shared",
                "method.teacher.ema_decay=null",
            ]
        )
    )
    assert result.metrics["train/loss"] == pytest.approx(0.0, abs=1e-7)


def test_frozen_teacher_equals_lazy_ema_at_the_first_step(tiny_env, tmp_path) -> None:  # noqa: ANN001
    # Spec §2 sanity check: with fresh LoRA (B = 0) the step-0 loss is the base model's pruning-induced KL,
    # for
    # the frozen teacher and for the lazily initialised EMA teacher alike.
    ema = loop.run(compose_train([*train_overrides(tiny_env, tmp_path / "ema"), "method=scopd", "steps=1"]))
    frozen = loop.run(
        compose_train(
            [
                *train_overrides(tiny_env, tmp_path / "frozen"),
                "method=scopd",
                "steps=1",
                "method.teacher.kind=frozen",
                "method.teacher.ema_decay=null",
            ]
        )
    )
    ema, frozen = ema.metrics["train/loss"], frozen.metrics["train/loss"]
    assert ema == frozen > 0.0
