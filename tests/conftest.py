"""Shared fixtures: tiny random-weight models of both Qwen-VL families with a character-level processor."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

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
