"""In-LLM pruning in evaluation: FLOPs and KV bytes of layers < K and >= K against FlopCounterMode and a real
cache, the greedy and efficiency modes end to end with FastV/DART, and K checked before any model loads."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from tiny_models import char_processor, noise_image, tiny_qwen2_5_vl, tiny_qwen3_vl
from transformers import DynamicCache

from sparsectx.context import build_context
from sparsectx.encoding import encode_samples
from sparsectx.eval.costs import counted_flops, kv_cache_bytes, prefill_flops
from sparsectx.eval.protocol import select_visual
from sparsectx.eval.runner import run
from sparsectx.io import append_jsonl
from sparsectx.models import adapter_for
from sparsectx.prompting import PromptItem
from sparsectx.pruning.config import PrunerConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from eval.test_runner_support import (  # noqa: E402
    PATCH,
    SIDE,
    base_overrides,
    build_model_dir,
    compose_eval,
    write_bench,
)

PRUNERS = {
    "fastv": PrunerConfig("fastv", "llm", {}, 2),
    "dart": PrunerConfig("dart", "llm", {"pivot_image": 2, "pivot_text": 2}, 2),
}


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl"])
def tiny(request, tmp_path_factory):
    """Returns (adapter, processor) of a tiny random 4-layer model of each family."""
    processor = char_processor(PATCH[request.param], tmp_path_factory.mktemp(request.param))
    build = tiny_qwen2_5_vl if request.param == "qwen2_5_vl" else tiny_qwen3_vl
    return adapter_for(build(processor.tokenizer, seed=0, layers=4), signal_chunk=64), processor


def _samples(adapter, processor):
    patch = PATCH[adapter.family]
    images = [noise_image(patch * 8, patch * 10, 1), noise_image(patch * 8, patch * 8, 2)]
    return encode_samples(adapter, processor, [PromptItem("0", images, "How many circles?", "sys", "Think.")])


@torch.no_grad()
@pytest.mark.parametrize("name", sorted(PRUNERS))
def test_in_llm_prefill_flops_and_kv_bytes_match_the_counted_tally_and_cache(tiny, name):
    adapter, processor = tiny
    samples = _samples(adapter, processor)
    ctx = build_context(adapter, samples, select_visual(adapter, samples, PRUNERS[name], 0.25, 0, "t"))
    late = (2, int(ctx.inputs.late.keep.sum()))
    assert late[1] < ctx.inputs.embeds.shape[1]
    held = ctx.inputs.late.keep
    counted = counted_flops(lambda: adapter.logits(adapter.run_llm(ctx.inputs, None)[held]))
    text = adapter.model.config.get_text_config()
    assert prefill_flops(text, ctx.inputs.embeds.shape[1], late)["total"] == pytest.approx(counted, rel=0.02)
    assert prefill_flops(text, ctx.inputs.embeds.shape[1], None)["total"] > 1.2 * counted
    cache = DynamicCache(config=text)
    adapter.run_llm(ctx.inputs, cache)
    real = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    assert kv_cache_bytes(text, ctx.inputs.embeds.shape[1], 4, late) == real


def _four_layer_dir(tmp_path: Path, family: str, weights: bool) -> Path:
    model_dir = build_model_dir(tmp_path / family, family, weights=weights)
    config = json.loads((model_dir / "config.json").read_text())
    config["text_config"]["num_hidden_layers"] = 4
    config["text_config"].pop("layer_types", None)  # rebuilt for 4 layers
    (model_dir / "config.json").write_text(json.dumps(config))
    return model_dir


@pytest.mark.parametrize("name", sorted(PRUNERS))
def test_efficiency_mode_counts_layers_before_k(tmp_path: Path, name):
    model_dir = _four_layer_dir(tmp_path, "qwen2_5_vl", weights=False)
    bench = {"syn_ocr": write_bench(tmp_path / "syn_ocr.tsv", "syn_ocr", 1, SIDE)}
    overrides = [
        f"pruner={name}",
        "bench=syn_ocr",
        "mode=efficiency",
        "efficiency.bench=syn_ocr",
        "efficiency.budgets=[0.25]",
        "efficiency.num_items=1",
        "efficiency.repetitions=1",
        "efficiency.warmup=0",
        "efficiency.decode_tokens=3",
        "efficiency.count_flops=true",
    ]
    out = run(compose_eval([*overrides, *base_overrides(model_dir, tmp_path / "results", bench, 4)]))[0]
    full, pruned = json.loads(out.read_text())["budgets"]
    assert pruned["kept_visual"] == 4 and full["kept_visual"] == 16
    assert pruned["prefill_len"] == full["prefill_len"]  # layers < K hold every token
    assert pruned["flops"]["selection"] > 0 == full["flops"]["selection"]
    for row in (full, pruned):
        assert row["counted_prefill_flops"] == pytest.approx(row["flops"]["prefill"], rel=0.02)
    # Two of four layers run on every token: the prefill ratio stays above half of the pre-LLM one's floor.
    assert 0.5 < pruned["ratios"]["prefill_flops"] < 1 and 0.5 < pruned["ratios"]["kv_cache"] < 1


@pytest.mark.parametrize("name", sorted(PRUNERS))
def test_greedy_evaluation_runs_with_an_in_llm_pruner(tmp_path: Path, name):
    model_dir = _four_layer_dir(tmp_path, "qwen3_vl", weights=True)
    bench = {"syn_ocr": write_bench(tmp_path / "syn_ocr.tsv", "syn_ocr", 3, SIDE)}
    overrides = [f"pruner={name}", "bench=syn_ocr", "budget=0.25", "batch_size=2", "queue_size=2"]
    out = run(compose_eval([*overrides, *base_overrides(model_dir, tmp_path / "results", bench, 4)]))[0]
    predictions = [json.loads(line) for line in (out.parent / "syn_ocr.predictions.jsonl").read_text().splitlines()]
    assert [p["kept_visual"] for p in predictions] == [4, 4, 4]


@pytest.mark.parametrize("layer", [2, 3])
def test_layer_not_below_the_llm_depth_fails_before_loading(tmp_path: Path, layer, monkeypatch):
    model_dir = build_model_dir(tmp_path / "two_layers", "qwen2_5_vl", weights=True)  # a 2-layer LLM
    bench = {"syn_ocr": write_bench(tmp_path / "syn_ocr.tsv", "syn_ocr", 1, SIDE)}
    import sparsectx.eval.runner as runner

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the config error")

    monkeypatch.setattr(runner, "load_eval_model", no_load)
    overrides = ["pruner=fastv", f"pruner.layer={layer}", "bench=syn_ocr", "budget=0.25"]
    with pytest.raises(ValueError, match=rf"pruner.layer={layer} is outside \[1, 1\]"):
        run(compose_eval([*overrides, *base_overrides(model_dir, tmp_path / "results", bench, 4)]))


@pytest.mark.parametrize("name", sorted(PRUNERS))
def test_passk_draws_from_one_in_llm_context(tmp_path: Path, name):
    model_dir = _four_layer_dir(tmp_path, "qwen2_5_vl", weights=True)
    bench = {"syn_count": write_bench(tmp_path / "syn_count.tsv", "syn_count", 2, SIDE)}
    overrides = [
        f"pruner={name}",
        "bench=syn_count",
        "mode=passk",
        "budget=0.25",
        "passk.n=3",
        "passk.sample_batch=2",
        "passk.max_new_tokens=3",
        "passk.hit_m=[1]",
    ]
    full_leaf = tmp_path / "full"  # the full-context model "solved" both items: both are in the cohort
    append_jsonl(full_leaf / "syn_count.predictions.jsonl", [{"id": str(i), "correct": True} for i in range(2)])
    overrides.append(f"passk.full_context_leaf={full_leaf}")
    out = run(compose_eval([*overrides, *base_overrides(model_dir, tmp_path / "results", bench, 4)]))[0]
    draws = [json.loads(line) for line in out.with_name("syn_count.passk.samples.jsonl").read_text().splitlines()]
    sparse = [d for d in draws if d["condition"] == "sparse"]
    assert len(sparse) == 2 and all(len(d["samples"]) == 3 and len(d["kept_indices"][0]) == 4 for d in sparse)
