"""Short runs on a GPU in bf16 finish with finite losses; the offloaded teacher really moves between the CPU
and the GPU and gives its memory back; the memory switches change no numbers; a run killed and resumed on the
GPU (8-bit AdamW states, CUDA RNG states) reaches the same weights (skipped without CUDA)."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import load_file

from sparsectx.training import memory
from sparsectx.training.loop import run

from .test_loop_support import TinyEnv, compose_train, shared_env, train_overrides
from .test_resume import Killed, final_weights, kill_during_update


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_scopd_plus_bf16_on_gpu_has_finite_losses(tiny_env, tmp_path) -> None:  # noqa: ANN001
    overrides = [
        *train_overrides(tiny_env, tmp_path),
        "method=scopd_plus",
        "steps=3",
        "model.device=cuda",
        "model.dtype=bfloat16",
        "method.positions.delta=0.3",  # 16 visual tokens per image: 1% adds none
    ]
    result = run(compose_train(overrides))
    assert result.steps == 3
    assert math.isfinite(result.metrics["train/loss"]) and result.metrics["train/loss"] >= 0.0
    assert (result.checkpoint / "config.json").is_file()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_offloaded_model_visits_the_gpu_and_gives_its_memory_back() -> None:
    model = torch.nn.Linear(1024, 1024)  # 4 MiB of weights
    torch.cuda.empty_cache()
    allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    with memory.on_device(model, torch.device("cuda")):
        assert model.weight.device.type == "cuda"
        assert torch.cuda.memory_allocated() >= allocated + 4 * 2**20
    assert model.weight.device.type == "cpu" and model.bias.device.type == "cpu"
    assert torch.cuda.memory_allocated() == allocated and torch.cuda.memory_reserved() <= reserved


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_lt_opd_memory_switches_on_gpu_match_the_plain_run(tiny_env, tmp_path) -> None:  # noqa: ANN001
    base = [
        "method=lt_opd",
        "steps=3",
        "model.device=cuda",
        "model.dtype=bfloat16",
        "method.optim.lr=0.01",
        "memory.optimizer_states=int8",
    ]
    switches = ["memory.activation_checkpointing=true", "memory.teacher_offload=true"]
    plain = run(compose_train([*train_overrides(tiny_env, tmp_path / "plain"), *base]))
    saving = run(compose_train([*train_overrides(tiny_env, tmp_path / "saving"), *base, *switches]))
    assert math.isfinite(saving.metrics["train/loss"]) and saving.metrics["train/loss"] > 0.0
    want, got = (load_file(str(r.checkpoint / "model.safetensors")) for r in (plain, saving))
    for key in want:  # checkpointing and offload change no numbers on the GPU either
        torch.testing.assert_close(got[key], want[key], atol=0, rtol=0, msg=key)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_lt_opd_twice_on_gpu_writes_the_same_weights(tiny_env, tmp_path) -> None:  # noqa: ANN001
    # LT-OPD trains the vision tower: its attention backward is the kernel that varied run to run before
    # deterministic=true (docs/performance.md, "Run-to-run determinism of training").
    common = ["method=lt_opd", "steps=3", "model.device=cuda", "method.optim.lr=0.01", "deterministic=true"]
    first, second = (run(compose_train([*train_overrides(tiny_env, tmp_path / n), *common])) for n in "ab")
    want, got = (r.checkpoint / "model.safetensors" for r in (first, second))
    assert got.read_bytes() == want.read_bytes()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_kill_and_resume_on_gpu_with_int8_states(tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    common = [
        "method=lt_opd",
        "steps=3",
        "save_every=2",
        "method.optim.lr=0.01",
        "model.device=cuda",
        "model.dtype=bfloat16",
        "memory.optimizer_states=int8",
        "memory.teacher_offload=true",
    ]
    straight = run(compose_train([*train_overrides(tiny_env, tmp_path / "straight"), *common]))
    cfg = compose_train([*train_overrides(tiny_env, tmp_path / "killed"), *common])
    with monkeypatch.context() as patch:
        kill_during_update(patch, at_step=2)  # state/ holds step 2 (8-bit moments, CUDA RNG states)
        with pytest.raises(Killed):
            run(cfg)
    resumed = run(cfg)
    assert resumed.steps == 3
    want, got = final_weights(straight), final_weights(resumed)
    for key in want:
        torch.testing.assert_close(got[key], want[key], atol=0, rtol=0, msg=key)
