"""Efficiency formulas on Qwen3.5's hybrid decoder, against FlopCounterMode per module and a real HF cache.

FlopCounterMode counts matmuls and convolutions by module, so each analytic part is checked against the
modules it describes: the full-attention layers' projections (with the gated q_proj) and SDPA, every MLP,
the linear-attention projections and convolution, the LM head. The recurrent update's per-token form
(``linear_core``) has no module of its own (HF's torch fallback reorganises it into chunk matmuls).
"""

from __future__ import annotations

import json

import pytest
import torch
from eval.test_runner_support import SIDE, base_overrides, compose_eval, write_bench
from qwen3_5_models import PATCH, tiny_bundle, tiny_qwen3_5
from tiny_models import char_processor, noise_image
from torch.utils.flop_counter import FlopCounterMode
from transformers import DynamicCache

from sparsectx.context import build_context
from sparsectx.encoding import encode_samples
from sparsectx.eval.costs import (
    EXTRA_FORMULAS,
    counted_flops,
    decode_flops,
    kv_cache_bytes,
    prefill_flops,
    vision_flops,
)
from sparsectx.eval.hybrid_costs import linear_state_bytes, linear_token_flops
from sparsectx.eval.protocol import select_visual
from sparsectx.eval.runner import run
from sparsectx.models.adapter import LLMInputs
from sparsectx.prompting import PromptItem, processor_inputs
from sparsectx.pruning.config import PrunerConfig

RANDOM = PrunerConfig("random", "pre_llm", {})
LINEAR_PROJ = ("in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "out_proj")


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    """Returns a tiny hybrid Qwen3.5 (linear attention at layers 0-2, full attention at layer 3)."""
    return tiny_bundle(tmp_path_factory.mktemp("qwen3_5_efficiency"))


def _prompt(patch: int) -> PromptItem:
    images = [noise_image(patch * 8, patch * 10, 1), noise_image(patch * 8, patch * 8, 2)]
    return PromptItem("0", images, "How many red circles are there?", "sys", "Think, then answer.")


def _context(hybrid, budget: float):
    samples = encode_samples(hybrid.adapter, hybrid.processor, [_prompt(hybrid.patch)])
    return build_context(hybrid.adapter, samples, select_visual(hybrid.adapter, samples, RANDOM, budget, 0, "t"))


def _by_module(fn) -> dict[str, dict[str, int]]:
    """Returns FlopCounterMode's FLOPs per (dotted) module name and aten op while ``fn`` runs."""
    with FlopCounterMode(display=False, custom_mapping=EXTRA_FORMULAS) as counter:
        fn()
    return {name: {str(op): n for op, n in ops.items()} for name, ops in counter.get_flop_counts().items()}


def _conv(counts: dict[str, dict[str, int]]) -> int:
    return sum(n for op, n in counts["Global"].items() if "convolution" in op)


def _sum(counts: dict[str, dict[str, int]], *, layers: list[int], parts: tuple[str, ...]) -> int:
    names = [f"Qwen3_5TextModel.layers.{i}.{part}" for i in layers for part in parts]
    return sum(sum(counts.get(name, {}).values()) for name in names)


@torch.no_grad()
@pytest.mark.parametrize("budget", [1.0, 0.25])
def test_prefill_parts_match_the_counted_modules(hybrid, budget: float) -> None:
    adapter = hybrid.adapter
    ctx = _context(hybrid, budget)
    text = adapter.model.config.get_text_config()
    counts = _by_module(lambda: adapter.logits(adapter.run_llm(ctx.inputs, None)))
    parts = prefill_flops(text, ctx.inputs.embeds.shape[1], None)
    full, linear = [3], [0, 1, 2]
    projections = tuple(f"self_attn.{p}_proj" for p in "qkvo")
    assert parts["attention_proj"] == _sum(counts, layers=full, parts=projections)
    scores = _sum(counts, layers=full, parts=("self_attn",)) - parts["attention_proj"]
    assert parts["attention_scores"] == scores
    assert parts["mlp"] == _sum(counts, layers=full + linear, parts=("mlp",))
    assert parts["linear_proj"] == _sum(counts, layers=linear, parts=tuple(f"linear_attn.{p}" for p in LINEAR_PROJ))
    # HF's causal_conv1d_fn pads by K - 1 on both sides and keeps the first L of its L + K - 1 outputs.
    width, kernel = ctx.inputs.embeds.shape[1], text.linear_conv_kernel_dim
    assert parts["linear_conv"] * (width + kernel - 1) == _conv(counts) * width
    assert parts["lm_head"] == sum(counts["Linear"].values())  # the LM head, called on its own
    assert parts["linear_core"] == 3 * ctx.inputs.embeds.shape[1] * linear_token_flops(text)["linear_core"] > 0


@torch.no_grad()
def test_one_decode_step_matches_the_counted_tally_but_the_recurrent_update(hybrid) -> None:
    adapter = hybrid.adapter
    ctx = _context(hybrid, 0.25)
    text = adapter.model.config.get_text_config()
    cache = DynamicCache(config=text)
    adapter.run_llm(ctx.inputs, cache)
    width = ctx.inputs.embeds.shape[1]
    mask = torch.cat([ctx.inputs.attention_mask, torch.ones(1, 1, dtype=torch.long)], dim=1)
    step = LLMInputs(
        adapter.embed_ids(torch.tensor([[7]])),
        mask,
        ctx.next_position.view(1, 1, 1).expand(3, 1, 1),
        torch.zeros(1, 1, dtype=torch.bool),
    )
    counts = _by_module(lambda: adapter.logits(adapter.run_llm(step, cache)))
    per_token = linear_token_flops(text)
    # HF's causal_conv1d_update convolves the K-window plus the new input: 2 outputs, the last one kept.
    assert _conv(counts) == 3 * 2 * per_token["linear_conv"]
    rotary = sum(counts["Qwen3_5TextModel.rotary_emb"].values())  # the M-RoPE angle matmul: not a layer cost
    counted = sum(counts["Global"].values()) - _conv(counts) - rotary
    analytic = decode_flops(text, width, 1, None) - 3 * (per_token["linear_core"] + per_token["linear_conv"])
    assert analytic == counted  # the recurrent update is elementwise in HF's one-token path: not counted


@torch.no_grad()
def test_cache_bytes_equal_the_real_hybrid_cache(hybrid) -> None:
    adapter = hybrid.adapter
    ctx = _context(hybrid, 0.25)
    text = adapter.model.config.get_text_config()
    cache = DynamicCache(config=text)
    adapter.run_llm(ctx.inputs, cache)
    real = 0
    for layer in cache.layers:
        tensors = (
            (layer.keys, layer.values) if hasattr(layer, "keys") else (layer.conv_states[0], layer.recurrent_states[0])
        )
        real += sum(t.numel() * t.element_size() for t in tensors)
    width = ctx.inputs.embeds.shape[1]
    assert kv_cache_bytes(text, width, 4, None) == real
    assert kv_cache_bytes(text, 2 * width, 4, None) - real == 2 * 2 * 16 * width * 4  # only layer 3 grows


@torch.no_grad()
def test_vision_flops_match_the_counted_tally(hybrid) -> None:
    batch = processor_inputs(hybrid.processor, [_prompt(hybrid.patch)])
    grid = batch["image_grid_thw"]
    counted = counted_flops(lambda: hybrid.adapter.visual(batch["pixel_values"], grid_thw=grid))
    config = hybrid.adapter.model.config.vision_config
    assert vision_flops(config, "qwen3_5", [tuple(g) for g in grid.tolist()]) == pytest.approx(counted, rel=0.02)


def test_efficiency_mode_end_to_end_on_a_saved_checkpoint(tmp_path) -> None:
    model_dir = tmp_path / "model"
    processor = char_processor(PATCH, model_dir)
    tiny_qwen3_5(processor.tokenizer, seed=0).save_pretrained(model_dir)
    bench = {"syn_ocr": write_bench(tmp_path / "syn_ocr.tsv", "syn_ocr", 2, SIDE)}
    overrides = [
        "bench=syn_ocr",
        "mode=efficiency",
        "efficiency.bench=syn_ocr",
        "efficiency.budgets=[0.25]",
        "efficiency.num_items=1",
        "efficiency.repetitions=1",
        "efficiency.warmup=0",
        "efficiency.decode_tokens=3",
        "efficiency.count_flops=false",
    ]
    out = run(compose_eval([*overrides, *base_overrides(model_dir, tmp_path / "results", bench, 4)]))[0]
    full, pruned = json.loads(out.read_text())["budgets"]
    text = tiny_qwen3_5(processor.tokenizer, seed=0).config.get_text_config()
    states = 3 * linear_state_bytes(text, 4)  # what no budget changes
    assert pruned["kv_cache_bytes"] - states == pytest.approx(
        (full["kv_cache_bytes"] - states) * pruned["prefill_len"] / full["prefill_len"]
    )
    assert 0 < pruned["ratios"]["prefill_flops"] < 1 and pruned["flops"]["vision"] == full["flops"]["vision"] > 0
    assert {"linear_proj", "linear_conv", "linear_core"} <= set(full["flops"]["prefill_parts"])
