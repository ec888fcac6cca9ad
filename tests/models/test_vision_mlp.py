"""The aligned vision MLP (zero-padded width) gives HF's outputs, follows weight changes and keeps gradients."""

from __future__ import annotations

import copy

import pytest
import torch
from tiny_models import char_processor, noise_image, tiny_qwen2_5_vl, tiny_qwen3_vl

from sparsectx.models import adapter_for, set_vision_attention
from sparsectx.models.vision_mlp import align_vision_mlps, padded_weights

BUILDERS = {"qwen2_5_vl": (tiny_qwen2_5_vl, 14), "qwen3_vl": (tiny_qwen3_vl, 16)}
MULTIPLE = 48  # the tiny towers are 64 wide: padded to 96


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def towers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Returns (reference model, aligned copy, pixel_values, grid_thw) for two images of different sizes."""
    build, patch = BUILDERS[request.param]
    processor = char_processor(patch, tmp_path_factory.mktemp(request.param))
    reference = build(processor.tokenizer, seed=0)
    set_vision_attention(reference, "grouped")
    aligned = copy.deepcopy(reference)
    assert align_vision_mlps(aligned, MULTIPLE) == len(aligned.model.visual.blocks)
    images = [noise_image(4 * patch, 6 * patch, 0), noise_image(8 * patch, 4 * patch, 1)]
    inputs = processor.image_processor(images=images, return_tensors="pt")
    return reference, aligned, inputs["pixel_values"].float(), inputs["image_grid_thw"]


@torch.no_grad()
def test_aligned_tower_equals_hf_mlp_with_signals(towers) -> None:
    reference, aligned, pixels, grid = towers
    want = adapter_for(reference, 64).encode_images(pixels, grid)
    got = adapter_for(aligned, 64).encode_images(pixels, grid)
    for ours, theirs in zip(got, want, strict=True):
        for name in ("embeds", "attention_received", "keys"):
            torch.testing.assert_close(getattr(ours, name), getattr(theirs, name), atol=1e-6, rtol=1e-6)
    mlp = aligned.model.visual.blocks[0].mlp
    weights = padded_weights(mlp, MULTIPLE)
    assert weights.second.shape[1] == 96 and weights.first.shape[0] == (192 if weights.gated else 96)


@torch.no_grad()
def test_padded_weights_follow_an_in_place_change(towers) -> None:
    reference, aligned, _, _ = towers
    mlp, ref_mlp = aligned.model.visual.blocks[0].mlp, reference.model.visual.blocks[0].mlp
    hidden = torch.randn(5, mlp_width(mlp), generator=torch.Generator().manual_seed(0))
    before = mlp(hidden)
    first, ref_first = next(mlp.parameters()), next(ref_mlp.parameters())  # a padded copy's source
    saved = first.clone()
    try:
        first.add_(0.5)  # bumps the version counter: the cached copy is stale
        ref_first.add_(0.5)
        torch.testing.assert_close(mlp(hidden), ref_mlp(hidden), atol=1e-6, rtol=1e-6)
        assert not torch.allclose(mlp(hidden), before)
    finally:
        first.copy_(saved)
        ref_first.copy_(saved)


def test_training_forward_keeps_gradients(towers) -> None:
    _, aligned, _, _ = towers
    mlp = aligned.model.visual.blocks[0].mlp
    hidden = torch.randn(3, mlp_width(mlp), generator=torch.Generator().manual_seed(1))
    mlp(hidden).sum().backward()
    grads = [p.grad for p in mlp.parameters()]
    assert all(g is not None and g.abs().sum() > 0 for g in grads)
    mlp.zero_grad(set_to_none=True)


def test_aligned_widths_and_zero_are_left_alone(towers) -> None:
    reference, _, _, _ = towers
    model = copy.deepcopy(reference)
    assert align_vision_mlps(model, 0) == 0
    assert align_vision_mlps(model, 32) == 0  # 64 is already a multiple of 32
    assert "forward" not in vars(model.model.visual.blocks[0].mlp)
    assert align_vision_mlps(model, MULTIPLE) == len(model.model.visual.blocks)
    assert align_vision_mlps(model, 0) == 0  # restores the modules' own forward
    assert all("forward" not in vars(block.mlp) for block in model.model.visual.blocks)


def mlp_width(mlp: torch.nn.Module) -> int:
    """Returns the MLP's input width."""
    first = mlp.gate_proj if hasattr(mlp, "gate_proj") else mlp.linear_fc1
    return first.in_features
