"""Shared fixtures: tiny random-weight models of both Qwen-VL families with a character-level processor; and
how the suite shares the machine's cores when ``make test`` runs it on several workers (pytest-xdist)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from tiny_models import char_processor, tiny_qwen2_5_vl, tiny_qwen3_vl  # noqa: E402

from sparsectx.models import adapter_for  # noqa: E402
from sparsectx.models.adapter import VLMAdapter  # noqa: E402
from sparsectx.models.processor import ImageTextProcessor  # noqa: E402


@dataclass
class TinyVLM:
    """A tiny model under test, its adapter, processor and patch size."""

    family: str
    adapter: VLMAdapter
    processor: ImageTextProcessor
    patch: int


@pytest.fixture(scope="session", params=["qwen2_5_vl", "qwen3_vl"])
def tiny_vlm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> TinyVLM:
    """Returns a tiny random-weight VLM of each family (fp32, sdpa, CPU)."""
    patch = 14 if request.param == "qwen2_5_vl" else 16
    processor = char_processor(patch, tmp_path_factory.mktemp(request.param))
    build = tiny_qwen2_5_vl if request.param == "qwen2_5_vl" else tiny_qwen3_vl
    model = build(processor.tokenizer, seed=0)
    return TinyVLM(request.param, adapter_for(model, signal_chunk=8), processor, patch)


def pytest_configure(config: pytest.Config) -> None:
    """Gives each pytest-xdist worker its share of the cores (``make test`` runs ``-n auto``).

    Every worker's torch would otherwise start a thread per core, so N workers would run N x cores threads on
    the cores and each would spin-wait on the others; the share also reaches the processes a test starts
    (``OMP_NUM_THREADS``) unless the test sets its own.
    """
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        threads = max(1, (os.cpu_count() or 1) // workers)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Moves the modules that hold ``slow`` tests (end-to-end runs, minutes each) to the front, each module's
    tests kept together and in order.

    With ``-n auto --dist loadfile`` the first modules are dealt to the workers in turn, so the long runs start
    at once on every worker and the short modules fill in behind them, rather than one long module starting
    last and running alone while the other workers idle.
    """
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)
