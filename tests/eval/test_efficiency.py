"""Efficiency: analytic FLOPs vs FlopCounterMode, KV-cache bytes vs a real cache, and the mode end to end."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch
from tiny_models import char_processor, noise_image, tiny_qwen2_5_vl, tiny_qwen3_vl
from transformers import DynamicCache

from sparsectx.context import build_context
from sparsectx.encoding import encode_samples
from sparsectx.eval.costs import (
    counted_flops,
    kv_cache_bytes,
    prefill_flops,
    vision_flops,
)
from sparsectx.eval.protocol import select_visual
from sparsectx.eval.runner import run
from sparsectx.models import LoadedModel, adapter_for
from sparsectx.prompting import PromptItem, processor_inputs
from sparsectx.pruning.config import PrunerConfig

from .test_runner_support import PATCH, SIDE, base_overrides, build_model_dir, compose_eval, write_bench

RANDOM = PrunerConfig("random", "pre_llm", {})


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl"])
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    processor = char_processor(PATCH[request.param], tmp_path_factory.mktemp(request.param))
    build = tiny_qwen2_5_vl if request.param == "qwen2_5_vl" else tiny_qwen3_vl
    return LoadedModel(adapter_for(build(processor.tokenizer, seed=0), signal_chunk=64), processor)


def _prompt(patch: int) -> PromptItem:
    # Two images; the first has 5 merged rows, so Qwen2.5-VL's 2x2-token windows do not tile it exactly.
    images = [noise_image(patch * 8, patch * 10, 1), noise_image(patch * 8, patch * 8, 2)]
    return PromptItem("0", images, "How many red circles are there?", "sys", "Think, then answer.")


@torch.no_grad()
@pytest.mark.parametrize("budget", [1.0, 0.25])
def test_analytic_prefill_flops_match_the_counted_tally(tiny, budget):
    samples = encode_samples(tiny.adapter, tiny.processor, [_prompt(PATCH[tiny.adapter.family])])
    ctx = build_context(tiny.adapter, samples, select_visual(tiny.adapter, samples, RANDOM, budget, 0, "t"))
    counted = counted_flops(lambda: tiny.adapter.logits(tiny.adapter.run_llm(ctx.inputs, None)))
    text = tiny.adapter.model.config.get_text_config()
    assert prefill_flops(text, ctx.inputs.embeds.shape[1], None)["total"] == pytest.approx(counted, rel=0.02)


@torch.no_grad()
def test_analytic_vision_flops_match_the_counted_tally(tiny):
    batch = processor_inputs(tiny.processor, [_prompt(PATCH[tiny.adapter.family])])
    grid = batch["image_grid_thw"]
    counted = counted_flops(lambda: tiny.adapter.visual(batch["pixel_values"], grid_thw=grid))
    config = tiny.adapter.model.config.vision_config
    analytic = vision_flops(config, tiny.adapter.family, [tuple(g) for g in grid.tolist()])
    assert analytic == pytest.approx(counted, rel=0.02)


@torch.no_grad()
def test_kv_cache_bytes_equal_the_real_cache(tiny):
    samples = encode_samples(tiny.adapter, tiny.processor, [_prompt(PATCH[tiny.adapter.family])])
    ctx = build_context(tiny.adapter, samples, select_visual(tiny.adapter, samples, RANDOM, 0.25, 0, "t"))
    cache = DynamicCache(config=tiny.adapter.model.config.get_text_config())
    tiny.adapter.run_llm(ctx.inputs, cache)
    real = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    text = tiny.adapter.model.config.get_text_config()
    assert kv_cache_bytes(text, ctx.inputs.embeds.shape[1], 4, None) == real


def test_prefill_flops_count_a_multiply_accumulate_as_two():
    class Text:
        hidden_size, num_attention_heads, num_key_value_heads, head_dim = 8, 2, 1, 4
        intermediate_size, num_hidden_layers, vocab_size = 16, 1, 10

    parts = prefill_flops(Text(), 3, None)
    assert parts["lm_head"] == 2 * 3 * 8 * 10
    assert parts["mlp"] == 3 * 2 * 3 * 8 * 16
    assert parts["attention_proj"] == 2 * 3 * 8 * (2 * 4) + 2 * 2 * 3 * 8 * 4 + 2 * 3 * (2 * 4) * 8
    assert parts["attention_scores"] == 2 * (2 * 2 * 3 * 3 * 4)


def test_efficiency_mode_on_a_config_only_directory(tmp_path: Path):
    model_dir = build_model_dir(tmp_path / "config_only", "qwen2_5_vl", weights=False)
    assert not list(model_dir.glob("*.safetensors"))
    bench = {"syn_ocr": write_bench(tmp_path / "syn_ocr.tsv", "syn_ocr", 2, SIDE)}
    overrides = [
        "bench=syn_ocr",
        "mode=efficiency",
        "efficiency.bench=syn_ocr",
        "efficiency.budgets=[0.25]",
        "efficiency.num_items=1",
        "efficiency.repetitions=3",
        "efficiency.warmup=1",
        "efficiency.decode_tokens=3",
        "efficiency.count_flops=true",
    ]
    cfg = compose_eval([*overrides, *base_overrides(model_dir, tmp_path / "results", bench, 4)])
    out = run(cfg)[0]
    assert out == tmp_path / "results" / "dev" / "tiny" / "base" / "visionzip" / "efficiency.json"
    payload = json.loads(out.read_text())
    assert payload["model"]["random_weights"] is True
    assert (payload["protocol"], payload["decoding"], payload["decode_forwards"]) == ("quick", "greedy", 3)
    assert payload["selection"]["selected"] == 2 and payload["selection"]["measured"] == 1
    full, pruned = payload["budgets"]
    assert (full["budget"], pruned["budget"]) == (1.0, 0.25)
    assert full["ratios"]["prefill_flops"] == 1.0 and full["kv_cache_bytes"] > pruned["kv_cache_bytes"]
    assert pruned["kept_visual"] == 4 and full["kept_visual"] == 16
    assert 0 < pruned["ratios"]["prefill_flops"] < 1 and 0 < pruned["ratios"]["kv_cache"] < 1
    assert pruned["flops"]["vision"] == full["flops"]["vision"] > 0
    for row in payload["budgets"]:
        assert row["counted_prefill_flops"] == pytest.approx(row["flops"]["prefill"], rel=0.02)
        assert set(row["latency_ms"]) == {"vision", "selection", "prefill", "decode", "total"}
        assert all(value > 0 for value in row["latency_ms"].values())
        for stage, per_item in row["repetitions_ms"].items():  # quick: median of each item's repetitions
            assert [len(reps) for reps in per_item] == [3]
            assert row["latency_ms"][stage] == pytest.approx(statistics.median(per_item[0]))
    stamp = out.stat().st_mtime_ns
    run(cfg)
    assert out.stat().st_mtime_ns == stamp  # finished: skipped


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_efficiency_of_a_real_size_architecture_on_gpu(tmp_path: Path):
    """Qwen2.5-VL-7B dimensions with random weights (cost does not depend on weight values), bf16 on CUDA."""
    model_dir = build_model_dir(tmp_path / "qwen2_5_vl_7b", "qwen2_5_vl", weights=False)
    config = json.loads((model_dir / "config.json").read_text())
    config["vision_config"].update(
        depth=32,
        hidden_size=1280,
        intermediate_size=3420,
        num_heads=16,
        out_hidden_size=3584,
        window_size=112,
        fullatt_block_indexes=[7, 15, 23, 31],
    )
    config["text_config"].update(
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        max_position_embeddings=128000,
        vocab_size=152064,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
    )
    config["text_config"].pop("layer_types", None)  # rebuilt for 28 layers
    (model_dir / "config.json").write_text(json.dumps(config))
    images = json.loads((model_dir / "preprocessor_config.json").read_text())
    images["size"] = {"longest_edge": 12845056, "shortest_edge": 3136}  # Qwen2.5-VL's own pixel range
    (model_dir / "preprocessor_config.json").write_text(json.dumps(images))
    bench = {"syn_ocr": write_bench(tmp_path / "syn_ocr.tsv", "syn_ocr", 2, 896)}
    overrides = [
        "bench=syn_ocr",
        "mode=efficiency",
        "efficiency.bench=syn_ocr",
        "efficiency.budgets=[0.05,0.1]",
        "efficiency.num_items=2",
        "efficiency.repetitions=3",
        "efficiency.warmup=1",
        "efficiency.decode_tokens=32",
        "efficiency.count_flops=true",
        "model.device=cuda",
        "model.dtype=bfloat16",
    ]
    out = run(compose_eval([*overrides, *base_overrides(model_dir, tmp_path / "results", bench, 4)]))[0]
    payload = json.loads(out.read_text())
    for row in payload["budgets"]:  # shown with -s
        print(
            row["budget"],
            row["kept_visual"],
            row["prefill_len"],
            json.dumps(row["ratios"]),
            row["latency_ms"],
        )
    for row in payload["budgets"]:
        assert row["counted_prefill_flops"] == pytest.approx(row["flops"]["prefill"], rel=0.02)
    assert payload["budgets"][-1]["kept_visual"] == round(0.05 * 1024)
    assert payload["budgets"][-1]["ratios"]["prefill_flops"] < 0.5
