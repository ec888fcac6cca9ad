"""Pretraining's batched vision attention (the grouped one) equals HF's per-segment sdpa loop, values and gradients."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from tiny_models import char_processor, noise_image, tiny_qwen2_5_vl
from transformers import AutoTokenizer

from sparsectx.models.vision_attention import NAME, use_grouped_vision_attention
from sparsectx.pretrain.train import load_config, training_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def processor(tmp_path_factory: pytest.TempPathFactory):
    return char_processor(14, tmp_path_factory.mktemp("proc"))


@pytest.mark.parametrize(
    "sizes", [[(112, 112)] * 3, [(112, 112), (56, 84), (84, 112)]], ids=["equal-segments", "unequal-segments"]
)
def test_batched_attention_matches_sdpa_loop(processor, sizes) -> None:  # noqa: ANN001
    reference = tiny_qwen2_5_vl(processor.tokenizer, seed=0).float()
    candidate = copy.deepcopy(reference)
    use_grouped_vision_attention(candidate)
    images = [noise_image(w, h, seed) for seed, (w, h) in enumerate(sizes)]
    inputs = processor.image_processor(images=images, return_tensors="pt")
    pixels, grid = inputs["pixel_values"].float(), inputs["image_grid_thw"]

    outputs = []
    for model in (reference, candidate):
        out = model.model.visual(pixels, grid_thw=grid).pooler_output
        out.square().sum().backward()
        grads = [p.grad.clone() for p in model.model.visual.parameters()]
        outputs.append((out.detach(), grads))
    torch.testing.assert_close(outputs[1][0], outputs[0][0], atol=1e-5, rtol=1e-5)
    for got, want in zip(outputs[1][1], outputs[0][1], strict=True):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert candidate.config.vision_config._attn_implementation == NAME
    assert reference.config.vision_config._attn_implementation == "sdpa"


def test_switch_routes_the_vision_tower() -> None:
    """``train.batched_vision_attention`` picks the grouped attention (true) or leaves HF's (false)."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = load_config(compose("pretrain_tiny", overrides=["device=cpu"]))
    tokenizer = AutoTokenizer.from_pretrained(ROOT / cfg.out_dir)
    for batched, expected in ((True, NAME), (False, "sdpa")):
        model = training_model(cfg, tokenizer, batched)
        assert model.config.vision_config._attn_implementation == expected
