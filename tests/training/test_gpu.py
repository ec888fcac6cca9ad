"""A short SCOPD+ run on a GPU in bf16 finishes with finite losses (skipped without CUDA)."""

from __future__ import annotations

import math

import pytest
import torch

from sparsectx.training.loop import run

from .test_loop_support import TinyEnv, compose_train, shared_env, train_overrides


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_scopd_plus_bf16_on_gpu_has_finite_losses(tiny_env, tmp_path) -> None:  # noqa: ANN001
    overrides = [
        *train_overrides(tiny_env, tmp_path), "method=scopd_plus", "steps=3", "model.device=cuda",
        "model.dtype=bfloat16", "method.positions.delta=0.3",  # 16 visual tokens per image: 1% adds none
    ]  # fmt: skip
    result = run(compose_train(overrides))
    assert result.steps == 3
    assert math.isfinite(result.metrics["train/loss"]) and result.metrics["train/loss"] >= 0.0
    assert (result.checkpoint / "config.json").is_file()
