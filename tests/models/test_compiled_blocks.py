"""Compiled vision blocks and decoder layers (``model.compile_blocks``) give the eager modules' outputs.

The reference is the same tiny random-weight model without the routing, on the same inputs: the vision
tower with its pruner signals (grouped attention, padded MLP) and the language model on a left-padded
batch. A module whose weights train, or a call that fills a KV cache, must run its own eager forward.
Runs on the CPU (inductor's C++ backend) and, where CUDA exists, on the GPU too.
"""

from __future__ import annotations

import copy
import shutil

import pytest
import torch
from tiny_models import char_processor, noise_image, tiny_qwen2_5_vl, tiny_qwen3_vl
from transformers import DynamicCache

from sparsectx.models import ModelConfig, adapter_for, set_vision_attention
from sparsectx.models import compiled_blocks as cb
from sparsectx.models.adapter import LLMInputs
from sparsectx.models.vision_mlp import align_vision_mlps

BUILDERS = {"qwen2_5_vl": (tiny_qwen2_5_vl, 14), "qwen3_vl": (tiny_qwen3_vl, 16)}
DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="inductor's CPU backend needs a C compiler")


@pytest.fixture(scope="module", params=[(f, d) for f in sorted(BUILDERS) for d in DEVICES], ids=str)
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Returns (eager adapter, compiled adapter, pixel_values, grid_thw) of one family on one device."""
    family, device = request.param
    build, patch = BUILDERS[family]
    processor = char_processor(patch, tmp_path_factory.mktemp(family))
    eager = build(processor.tokenizer, seed=0).to(device)
    set_vision_attention(eager, "grouped")
    align_vision_mlps(eager, 48)  # the tiny MLP width 128 is not a multiple of 48: the padded path runs
    compiled = copy.deepcopy(eager)
    blocks = cb.block_lists(compiled)
    assert cb.compile_blocks(compiled, True) == len(blocks["vision"]) + len(blocks["decoder"])
    images = [noise_image(w, h, seed) for seed, (w, h) in enumerate([(4 * patch, 6 * patch), (6 * patch, 4 * patch)])]
    inputs = processor.image_processor(images=images, return_tensors="pt")
    pixels, grid = inputs["pixel_values"].float().to(device), inputs["image_grid_thw"].to(device)
    return adapter_for(eager, 8), adapter_for(compiled, 8), pixels, grid


def _llm_inputs(adapter, seed: int) -> LLMInputs:
    """Returns a left-padded batch of three rows of random embeddings (lengths 9, 6, 3)."""
    gen = torch.Generator().manual_seed(seed)
    config = adapter.model.config.get_text_config()
    device = adapter.model.device
    embeds = (torch.randn(3, 9, config.hidden_size, generator=gen) * 0.5).to(device)
    mask = torch.ones(3, 9, dtype=torch.long, device=device)
    mask[1, :3], mask[2, :6] = 0, 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0).expand(3, 3, 9)
    return LLMInputs(embeds, mask, positions, torch.zeros_like(mask, dtype=torch.bool), ())


@torch.no_grad()
def test_vision_tower_and_signals_equal_eager(pair) -> None:
    eager, compiled, pixels, grid = pair
    for got, want in zip(compiled.encode_images(pixels, grid), eager.encode_images(pixels, grid), strict=True):
        for name in ("embeds", "attention_received", "keys"):
            torch.testing.assert_close(getattr(got, name), getattr(want, name), atol=1e-5, rtol=1e-5)
        for g, w in zip(got.deepstack, want.deepstack, strict=True):
            torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


@torch.no_grad()
@pytest.mark.parametrize("seed", [0, 1])  # two calls: the second reuses (or generalises) the compiled code
def test_language_model_equals_eager_on_a_padded_batch(pair, seed: int) -> None:
    eager, compiled, _, _ = pair
    inputs = _llm_inputs(eager, seed)
    real = inputs.attention_mask.bool()
    got, want = compiled.run_llm(inputs, None), eager.run_llm(inputs, None)
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-5)


def test_training_and_cached_calls_run_the_eager_forward(pair, monkeypatch) -> None:
    _, compiled, _, _ = pair
    calls: list[str] = []
    monkeypatch.setattr(cb, "compiled", lambda kind: lambda *a, **kw: calls.append(kind))
    layer = compiled.language_model.layers[0]
    inputs = _llm_inputs(compiled, 2)
    with torch.no_grad():
        compiled.run_llm(inputs, DynamicCache(config=compiled.model.config.get_text_config()))
    assert calls == []  # a prefill into a cache: every layer eager
    layer.mlp.down_proj.weight.requires_grad_(True)
    try:
        hidden = layer(
            inputs.embeds,
            position_embeddings=compiled.language_model.rotary_emb(inputs.embeds, inputs.positions),
        )
    finally:
        layer.mlp.down_proj.weight.requires_grad_(False)
    assert calls == [] and hidden.requires_grad  # its weight trains: eager, and the graph reaches it
    with torch.no_grad():
        layer(
            inputs.embeds,
            position_embeddings=compiled.language_model.rotary_emb(inputs.embeds, inputs.positions),
        )
    assert calls == ["decoder"]


def test_switching_off_restores_the_modules_forwards(pair) -> None:
    _, compiled, _, _ = pair
    model = copy.deepcopy(compiled.model)
    assert cb.compile_blocks(model, False) == 0
    assert all("forward" not in vars(m) for blocks in cb.block_lists(model).values() for m in blocks)


def test_bad_compile_blocks_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="model.compile_blocks"):
        ModelConfig("tiny", "package:tiny-vlm", "float32", "cpu", "sdpa", 8, "grouped", 1, 64, "yes")
    assert cb.compile_on("auto", torch.device("cpu")) is False
    assert cb.compile_on("on", torch.device("cpu")) is True
