"""In-LLM pruning (FastV, DART), threaded preprocessing and compiled-block routing on GLM-4.6V and LLaVA-OV.

References: the keys HF's own decoder layer caches (post-RoPE, through each family's own rotary: GLM's is
interleaved and partial, LLaVA's Qwen2 1-D), one-thread preprocessing, and a full re-forward.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from engine_setup import default_engine
from family_models import family_model
from omegaconf import OmegaConf
from tiny_models import noise_image
from transformers import DynamicCache

from sparsectx.context import build_context, keep_all
from sparsectx.encoding import encode_samples
from sparsectx.engine import DecodeEngine, pruned_prompts
from sparsectx.generation import SamplingConfig
from sparsectx.models import adapter_for
from sparsectx.models.compiled_blocks import block_lists, compile_blocks
from sparsectx.models.processor import load_processor
from sparsectx.prompting import PromptItem, processor_inputs
from sparsectx.pruning import pruners_at
from sparsectx.pruning.base import IN_LLM
from sparsectx.pruning.layer import select_in_llm

CONF = Path(__file__).resolve().parents[2] / "conf" / "pruner"
PATCH = {"glm46v": 14, "llava_onevision": 16}


@pytest.fixture(scope="module", params=sorted(PATCH))
def tiny(request, tmp_path_factory):  # noqa: ANN001, ANN201
    """Returns (family, model, adapter, processor, its directory) with a 3-layer decoder (K = 2 fits)."""
    root = tmp_path_factory.mktemp(request.param)
    model, processor = family_model(request.param, root, layers=3)
    return request.param, model, adapter_for(model, signal_chunk=8), processor, root


def _items(family: str) -> list[PromptItem]:
    p = PATCH[family]
    return [
        PromptItem("wide", [noise_image(p * 8, p * 6, 1)], "what colour?", "sys", ""),
        PromptItem("two", [noise_image(p * 4, p * 6, 3), noise_image(p * 6, p * 4, 4)], "same?", "s", ""),
    ]


@torch.no_grad()
def test_layer_signal_keys_are_the_keys_hf_caches(tiny) -> None:  # noqa: ANN001
    family, _, adapter, processor, _ = tiny
    samples = encode_samples(adapter, processor, _items(family))
    ctx = build_context(adapter, samples, [keep_all(s) for s in samples])
    signals = adapter.llm_signals(ctx.inputs, 2, ctx.prompt_end - 1)
    cache = DynamicCache(config=adapter.model.config.get_text_config())
    adapter.run_llm(ctx.inputs, cache)
    keys = cache.layers[1].keys  # (B, KV, L, d): layer K - 1 = 1, post-RoPE
    want = keys.transpose(1, 2).reshape(*keys.shape[:1], keys.shape[2], -1)
    real = ctx.inputs.attention_mask.bool()
    torch.testing.assert_close(signals.keys[real], want[real].float(), atol=1e-5, rtol=1e-5)
    rows = signals.attention.sum(-1)
    torch.testing.assert_close(rows, torch.ones_like(rows), atol=1e-5, rtol=0)  # a softmax row per prompt


@pytest.mark.parametrize("name", pruners_at(IN_LLM))
@torch.no_grad()
def test_in_llm_pruners_keep_exactly_k_and_decode_as_the_reforward(name: str, tiny) -> None:  # noqa: ANN001
    family, _, adapter, processor, _ = tiny
    params = OmegaConf.to_container(OmegaConf.load(CONF / f"{name}.yaml"))["params"]
    samples = encode_samples(adapter, processor, _items(family))
    selections = select_in_llm(adapter, samples, name, 0.3, params, 2)
    for sample, sel in zip(samples, selections, strict=True):
        for image, s in zip(sample.images, sel, strict=True):
            assert s.indices.numel() == min(max(round(0.3 * image.num_tokens), 1), image.num_tokens)
    steps = 5
    engine = DecodeEngine(adapter, processor.tokenizer, default_engine())
    cached = engine.generate(
        pruned_prompts(adapter, samples, selections), SamplingConfig(steps, False, 1.0, 1.0, 0, [])
    )
    produced = [torch.zeros(0, dtype=torch.long) for _ in samples]
    for _ in range(steps):
        ctx = build_context(adapter, samples, selections, produced)
        nxt = adapter.logits(adapter.run_llm(ctx.inputs, None)[:, -1]).argmax(-1)
        produced = [torch.cat([p, n[None]]) for p, n in zip(produced, nxt, strict=True)]
    assert [g.token_ids.tolist() for g in cached] == [p.tolist() for p in produced]


@torch.no_grad()
def test_threaded_preprocessing_equals_one_thread(tiny) -> None:  # noqa: ANN001
    family, _, _, processor, root = tiny
    threaded = load_processor(root, image_workers=3)
    one, many = processor_inputs(processor, _items(family)), processor_inputs(threaded, _items(family))
    assert one.keys() == many.keys()
    for key in one:
        assert torch.equal(one[key], many[key]), key


def test_compiled_blocks_route_only_the_towers_that_exist(tiny) -> None:  # noqa: ANN001
    family, model, _, _, _ = tiny
    lists = block_lists(model)
    assert set(lists) == ({"vision", "decoder"} if family == "glm46v" else {"decoder"})
    expected = sum(len(blocks) for blocks in lists.values())
    try:
        assert compile_blocks(model, True) == expected
    finally:
        assert compile_blocks(model, False) == 0
