"""Compiled vision blocks and decoder layers (``model.compile_blocks``) on Qwen3.5 give the eager outputs.

The reference is the same tiny random-weight Qwen3.5 without the routing: its vision tower with the pruner
signals (grouped attention, padded MLP), and its hybrid language model (linear-attention layers through
HF's torch fallback of the gated delta rule) on a left-padded batch. CPU inductor (C++ backend).
"""

from __future__ import annotations

import copy
import shutil

import pytest
import torch
from qwen3_5_models import PATCH, tiny_qwen3_5
from tiny_models import char_processor, noise_image

from sparsectx.models import adapter_for, set_vision_attention
from sparsectx.models import compiled_blocks as cb
from sparsectx.models.adapter import LLMInputs
from sparsectx.models.vision_mlp import align_vision_mlps

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="inductor's CPU backend needs a C compiler")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory):
    """Returns (eager adapter, compiled adapter, pixel_values, grid_thw) of the tiny hybrid Qwen3.5."""
    processor = char_processor(PATCH, tmp_path_factory.mktemp("qwen3_5_compiled"))
    eager = tiny_qwen3_5(processor.tokenizer, seed=0)
    set_vision_attention(eager, "grouped")
    align_vision_mlps(eager, 48)  # the tiny MLP width 64 is not a multiple of 48: the padded path runs
    compiled = copy.deepcopy(eager)
    blocks = cb.block_lists(compiled)
    assert cb.compile_blocks(compiled, True) == len(blocks["vision"]) + len(blocks["decoder"]) == 3 + 4
    images = [noise_image(w, h, seed) for seed, (w, h) in enumerate([(4 * PATCH, 6 * PATCH), (6 * PATCH, 4 * PATCH)])]
    inputs = processor.image_processor(images=images, return_tensors="pt")
    return (
        adapter_for(eager, 8),
        adapter_for(compiled, 8),
        inputs["pixel_values"].float(),
        inputs["image_grid_thw"],
    )


@torch.no_grad()
def test_vision_tower_and_signals_equal_eager(pair) -> None:
    eager, compiled, pixels, grid = pair
    for got, want in zip(compiled.encode_images(pixels, grid), eager.encode_images(pixels, grid), strict=True):
        for name in ("embeds", "attention_received", "keys"):
            torch.testing.assert_close(getattr(got, name), getattr(want, name), atol=1e-5, rtol=1e-5)
        assert got.deepstack == want.deepstack == ()


@torch.no_grad()
def test_hybrid_language_model_equals_eager_on_a_padded_batch(pair) -> None:
    eager, compiled, _, _ = pair
    gen = torch.Generator().manual_seed(0)
    embeds = torch.randn(3, 9, eager.model.config.get_text_config().hidden_size, generator=gen) * 0.5
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, :3], mask[2, :6] = 0, 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0).expand(3, 3, 9)
    inputs = LLMInputs(embeds, mask, positions, torch.zeros_like(mask, dtype=torch.bool), ())
    real = mask.bool()
    torch.testing.assert_close(
        compiled.run_llm(inputs, None)[real], eager.run_llm(inputs, None)[real], atol=1e-5, rtol=1e-5
    )
