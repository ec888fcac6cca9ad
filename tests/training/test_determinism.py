"""``deterministic``: the training process runs PyTorch's deterministic algorithms (strict) when the key is
true, with cuBLAS's reproducible workspace set, and the plain kernels when false. That two CUDA runs then write
the same weights is tested on the GPU (``test_gpu.py``) and was measured on the device for the tiny LT-OPD
(docs/performance.md)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from sparsectx.training.determinism import CUBLAS_WORKSPACE, apply_determinism

from .test_loop_support import TinyEnv, make_trainer, shared_env


@pytest.fixture(scope="module")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    return shared_env(tmp_path_factory)


@pytest.fixture
def restored(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Restores the process's deterministic mode and cuBLAS setting after the test."""
    before = torch.are_deterministic_algorithms_enabled()
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    yield
    torch.use_deterministic_algorithms(before)


def test_setup_turns_deterministic_algorithms_on_and_off(tiny_env, tmp_path, restored) -> None:  # noqa: ANN001
    make_trainer(tiny_env, tmp_path / "on", "deterministic=true")
    assert torch.are_deterministic_algorithms_enabled()
    assert not torch.is_deterministic_algorithms_warn_only_enabled()  # strict: a missing kernel raises
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_WORKSPACE
    make_trainer(tiny_env, tmp_path / "off", "deterministic=false")
    assert not torch.are_deterministic_algorithms_enabled()


def test_a_callers_cublas_setting_is_kept(monkeypatch, restored) -> None:  # noqa: ANN001
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    apply_determinism(True)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8" and torch.are_deterministic_algorithms_enabled()
