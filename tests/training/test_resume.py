"""Kill and resume: a run killed at any point and started again reaches the same final weights; a changed
run-defining key is an error naming it; interrupted directory swaps are recovered."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from sparsectx.training import loop
from sparsectx.training.checkpoint import read_meta

from .test_loop_support import TinyEnv, compose_train, shared_env, train_overrides


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


class Killed(BaseException):
    """Stands in for SIGKILL: nothing after it runs (not even except-Exception handlers)."""


def final_weights(result: loop.RunResult) -> dict[str, torch.Tensor]:
    """Returns the exported checkpoint's tensors."""
    return load_file(str(result.checkpoint / "model.safetensors"))


def kill_during_update(monkeypatch: pytest.MonkeyPatch, at_step: int) -> None:
    """Makes the run die after the gradients of optimizer step ``at_step`` (0-based) but before its update."""
    real = loop.apply_update

    def dying(trainer: loop.Trainer) -> float:
        if trainer.step == at_step:
            raise Killed
        return real(trainer)

    monkeypatch.setattr(loop, "apply_update", dying)


@pytest.mark.parametrize(
    "overrides",
    [
        ["method=scopd_plus", "method.positions.delta=0.3"],
        ["method=lt_opd"],
        pytest.param(  # 85 s: make test-long (the other three cover the resume path in CI)
            ["method=lt_opd", "memory.optimizer_states=int8", "memory.teacher_offload=true"], marks=pytest.mark.long
        ),
        ["method=lt_opd", "method.rollouts_per_prompt=2"],
    ],
    ids=[
        "scopd_plus_lora_ema",
        "lt_opd_full_frozen_sampled_curriculum",
        "lt_opd_int8_adamw_offloaded_teacher",
        "lt_opd_two_rollouts_per_question",
    ],
)
def test_kill_and_resume_reaches_the_same_weights(overrides: list[str], tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    common = [*overrides, "steps=3", "save_every=2", "method.optim.lr=0.01"]
    straight = loop.run(compose_train([*train_overrides(tiny_env, tmp_path / "straight"), *common]))
    cfg = compose_train([*train_overrides(tiny_env, tmp_path / "killed"), *common])
    with monkeypatch.context() as patch:
        kill_during_update(patch, at_step=2)  # state/ holds step 2; step 3 is lost and redone
        with pytest.raises(Killed):
            loop.run(cfg)
    run_dir = next((tmp_path / "killed").glob("*/*/*/*/*"))
    assert read_meta(run_dir / "state")["step"] == 2 and not (run_dir / "checkpoint").exists()
    updates = {"n": 0}
    real = loop.apply_update

    def counting(trainer: loop.Trainer) -> float:
        updates["n"] += 1
        return real(trainer)

    monkeypatch.setattr(loop, "apply_update", counting)
    resumed = loop.run(cfg)
    assert updates["n"] == 1  # it resumed from state/ (step 2) and redid only the lost step
    assert (resumed.steps, resumed.samples_seen) == (straight.steps, straight.samples_seen) == (3, 6)
    want, got = final_weights(straight), final_weights(resumed)
    assert want.keys() == got.keys()
    for key in want:
        torch.testing.assert_close(got[key], want[key], atol=1e-6, rtol=0, msg=key)
    moved = [k for k in want if not torch.equal(want[k], load_file(str(tiny_env.model_dir / "model.safetensors"))[k])]
    assert moved  # it trained


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ("method.positions.fraction=0.2", "method.positions.fraction"),
        ("pruner.params.contextual_fraction=0.25", "pruner.params.contextual_fraction"),
        ("seed=1", "seed"),
        ("method.teacher.ema_decay=0.9", "method.teacher.ema_decay"),  # the tiny model's SCOPD decay is 0.99
        ("memory.optimizer_states=int8", "memory.optimizer_states"),
        ("model.answer_prefix='<answer>'", "model.answer_prefix"),  # the prompt the rollouts continue
        ("model.max_visual_tokens=64", "model.max_visual_tokens"),  # the visual tokens before pruning
    ],
)
def test_changed_run_defining_key_refuses_to_resume(change: str, key: str, tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    base = [
        *train_overrides(tiny_env, tmp_path),
        "method=scopd_plus",
        "method.positions.delta=0.3",
        "steps=2",
    ]
    with monkeypatch.context() as patch:
        kill_during_update(patch, at_step=1)
        with pytest.raises(Killed):
            loop.run(compose_train(base))
    with pytest.raises(ValueError, match=rf"cannot resume .*run-defining keys changed \({key}: "):
        loop.run(compose_train([*base, change]))


def test_bookkeeping_change_warns_and_resumes(tiny_env, tmp_path, monkeypatch, caplog) -> None:  # noqa: ANN001
    base = [*train_overrides(tiny_env, tmp_path), "method=scopd", "steps=2"]
    with monkeypatch.context() as patch:
        kill_during_update(patch, at_step=1)
        with pytest.raises(Killed):
            loop.run(compose_train(base))
    with caplog.at_level(logging.WARNING, logger="sparsectx.training.checkpoint"):
        result = loop.run(compose_train([*base, "log_every=2"]))
    assert result.steps == 2
    assert any("log_every changed" in r.message for r in caplog.records)


def test_finished_run_is_a_no_op_and_interrupted_swaps_recover(tiny_env, tmp_path) -> None:  # noqa: ANN001
    cfg = compose_train([*train_overrides(tiny_env, tmp_path), "method=sft", "steps=1"])
    first = loop.run(cfg)
    stamp = (first.checkpoint / "model.safetensors").stat().st_mtime_ns
    state = first.run_dir / "state"
    state.rename(state.with_name(".state.old"))  # a crash between the two renames of a state swap
    (first.run_dir / ".state.tmp").mkdir()  # and a half-written temporary directory
    again = loop.run(cfg)
    assert again.steps == 1 and again.metrics == {}
    assert (first.checkpoint / "model.safetensors").stat().st_mtime_ns == stamp  # not rewritten
    assert read_meta(state)["step"] == 1


def test_resume_keeps_the_wandb_run_id(tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    ids: list[str | None] = []

    class FakeTracker:
        def __init__(self, resume_id: str | None) -> None:
            self.run_id = resume_id or "run-abc"

        def log(self, *args: object, **kwargs: object) -> None: ...
        def log_table(self, *args: object, **kwargs: object) -> None: ...
        def log_image(self, *args: object, **kwargs: object) -> None: ...
        def log_checkpoint(self, *args: object, **kwargs: object) -> None: ...
        def finish(self) -> None: ...

    def start(*args: object, resume_id: str | None, **kwargs: object) -> FakeTracker:
        ids.append(resume_id)
        return FakeTracker(resume_id)

    monkeypatch.setattr(loop, "start_run", start)
    base = [*train_overrides(tiny_env, tmp_path), "method=sft", "steps=2"]
    with monkeypatch.context() as patch:
        kill_during_update(patch, at_step=1)
        with pytest.raises(Killed):
            loop.run(compose_train(base))
    loop.run(compose_train(base))
    assert ids == [None, "run-abc"]
    assert read_meta(Path(next(tmp_path.glob("*/*/*/*/*"))) / "state")["wandb_id"] == "run-abc"
