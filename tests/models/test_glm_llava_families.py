"""GLM-4.6V and LLaVA-OneVision on tiny random-weight instances of the real HF classes.

References are the plain HF model's own forward and ``generate``, GLM's own ``get_rope_index`` (LLaVA: the 1-D
positions HF gives a left-padded row), key masking of the full context and a full re-forward of the same
selection.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from engine_setup import default_engine
from family_models import family_model
from key_masking import causal_key_bias, kept_keys
from omegaconf import OmegaConf
from tiny_models import noise_image
from transformers import GenerationConfig

from sparsectx.context import build_context, keep_all
from sparsectx.encoding import encode_samples
from sparsectx.engine import DecodeEngine, pruned_prompts
from sparsectx.generation import SamplingConfig, response_logits
from sparsectx.models import adapter_for
from sparsectx.prompting import PromptItem, processor_inputs
from sparsectx.pruning import declared_signals, pruners_at, select_tokens
from sparsectx.pruning.base import PRE_LLM as PRE_LLM_STAGE
from sparsectx.visual import Selection

CONF = Path(__file__).resolve().parents[2] / "conf" / "pruner"
PRE_LLM = pruners_at(PRE_LLM_STAGE)
RESPONSES = [torch.tensor([20, 21, 22, 23]), torch.tensor([30, 31]), torch.tensor([40, 41, 42])]
FAMILIES = ["glm46v", "llava_onevision"]
PATCH = {"glm46v": 14, "llava_onevision": 16}


@pytest.fixture(scope="module", params=FAMILIES)
def tiny(request, tmp_path_factory):  # noqa: ANN001, ANN201
    """Returns (family, model, adapter, processor) of a tiny random-weight model of each family."""
    model, processor = family_model(request.param, tmp_path_factory.mktemp(request.param))
    return request.param, model, adapter_for(model, signal_chunk=8), processor


def _items(family: str) -> list[PromptItem]:
    """Returns three prompts: a wide image, a small one (LLaVA: both tiled) and two images in one prompt."""
    p = PATCH[family]
    return [
        PromptItem("wide", [noise_image(p * 8, p * 6, 1)], "what colour?", "sys", "think"),
        PromptItem("small", [noise_image(p * 4, p * 4, 2)], "how many?", "sys", ""),
        PromptItem("two", [noise_image(p * 4, p * 6, 3), noise_image(p * 6, p * 4, 4)], "same?", "s", ""),
    ]


def _random(samples, budget: float, seed: int) -> list[list[Selection]]:  # noqa: ANN001
    gen = torch.Generator().manual_seed(seed)
    return [[select_tokens("random", im, s.question_embeds, budget, gen, {}) for im in s.images] for s in samples]


def hf_inputs(family: str, batch) -> dict:  # noqa: ANN001
    """Returns the processor batch as the HF model's forward takes it (LLaVA: no layouts, which HF derives)."""
    return {k: v for k, v in batch.items() if not (family == "llava_onevision" and k == "image_grid_thw")}


@torch.no_grad()
def test_budget_one_equals_plain_hf_model_logits(tiny) -> None:  # noqa: ANN001
    family, model, adapter, processor = tiny
    items = _items(family)
    batch = processor_inputs(processor, items)
    reference = model(**hf_inputs(family, batch)).logits
    samples = encode_samples(adapter, processor, items)
    ctx = build_context(adapter, samples, [keep_all(s) for s in samples])
    ours = adapter.logits(adapter.run_llm(ctx.inputs, None))
    real = batch["attention_mask"].bool()
    assert ours[ctx.inputs.attention_mask.bool()].shape == reference[real].shape
    torch.testing.assert_close(ours[ctx.inputs.attention_mask.bool()], reference[real], atol=1e-5, rtol=0)


@torch.no_grad()
def test_budget_one_greedy_text_equals_hf_generate(tiny) -> None:  # noqa: ANN001
    family, model, adapter, processor = tiny
    items, tok = _items(family), processor.tokenizer
    batch = processor_inputs(processor, items)
    config = GenerationConfig(max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=tok.pad_token_id)
    hf = model.generate(**hf_inputs(family, batch), generation_config=config)[:, batch["input_ids"].shape[1] :]
    samples = encode_samples(adapter, processor, items)
    prompts = pruned_prompts(adapter, samples, [keep_all(s) for s in samples])
    ours = DecodeEngine(adapter, tok, default_engine()).generate(prompts, SamplingConfig(12, False, 1.0, 1.0, 0, []))
    for row, gen in zip(hf, ours, strict=True):
        assert gen.token_ids.numel() > 0
        assert gen.token_ids.tolist() == row[: gen.token_ids.numel()].tolist()
        assert gen.text == tok.decode(row[: gen.token_ids.numel()], skip_special_tokens=True)


@torch.no_grad()
def test_unpruned_positions_are_the_familys_own(tiny) -> None:  # noqa: ANN001
    family, model, adapter, processor = tiny
    items = _items(family)
    batch = processor_inputs(processor, items)
    samples = encode_samples(adapter, processor, items)
    real = batch["attention_mask"].bool()
    if family == "glm46v":
        want, deltas = model.model.get_rope_index(
            batch["input_ids"],
            batch["mm_token_type_ids"],
            batch["image_grid_thw"],
            attention_mask=batch["attention_mask"],
        )
        assert any(len({*row.tolist()}) > 1 for s in samples for row in s.positions.T)  # truly 3-D positions
    else:  # 1-D: the position HF's generate gives each real token of a left-padded row
        want = (batch["attention_mask"].cumsum(-1) - 1).expand(3, -1, -1)
        deltas = torch.zeros(len(items), 1, dtype=torch.long)
    for b, sample in enumerate(samples):
        assert torch.equal(sample.positions, want[:, b, real[b]])
        assert sample.next_position == int(real[b].sum()) + int(deltas[b])


@torch.no_grad()
def test_kept_tokens_keep_unpruned_positions(tiny) -> None:  # noqa: ANN001
    family, _, adapter, processor = tiny
    samples = encode_samples(adapter, processor, _items(family))
    selections = _random(samples, 0.2, seed=11)
    full = build_context(adapter, samples, [keep_all(s) for s in samples], [torch.tensor([5, 6])] * 3)
    pruned = build_context(adapter, samples, selections, [torch.tensor([5, 6])] * 3)
    for b, (sample, sel) in enumerate(zip(samples, selections, strict=True)):
        full_real, pruned_real = full.inputs.attention_mask[b].bool(), pruned.inputs.attention_mask[b].bool()
        full_pos, pruned_pos = (
            full.inputs.positions[:, b][:, full_real],
            pruned.inputs.positions[:, b][:, pruned_real],
        )
        visual_full = full_pos[:, full.inputs.visual_mask[b][full_real]]
        kept = torch.cat([s.indices + sum(im.num_tokens for im in sample.images[:i]) for i, s in enumerate(sel)])
        assert torch.equal(pruned_pos[:, pruned.inputs.visual_mask[b][pruned_real]], visual_full[:, kept])
        assert torch.equal(pruned_pos[:, -2:], full_pos[:, -2:])
        assert pruned.next_position[b] == full.next_position[b] == sample.next_position + 2


def _key_masked_logits(adapter, samples, selections, responses):  # noqa: ANN001, ANN202
    """Keeps every token but masks the dropped visual tokens as attention keys (an explicit 4D mask)."""
    full = build_context(adapter, samples, [keep_all(s) for s in samples], responses)
    keys = kept_keys(adapter, samples, selections, full.inputs.attention_mask.bool())
    full.inputs.attention_mask = causal_key_bias(keys)
    return response_logits(adapter, full)


@torch.no_grad()
def test_physical_removal_equals_key_masking(tiny) -> None:  # noqa: ANN001
    family, _, adapter, processor = tiny
    samples = encode_samples(adapter, processor, _items(family))
    selections = _random(samples, 0.3, seed=5)
    pruned = build_context(adapter, samples, selections, RESPONSES)
    masked, mask = _key_masked_logits(adapter, samples, selections, RESPONSES)
    logits, mask_p = response_logits(adapter, pruned)
    assert torch.equal(mask, mask_p)
    torch.testing.assert_close(logits[mask], masked[mask], atol=1e-4, rtol=0)


@torch.no_grad()
def test_cached_pruned_decoding_equals_full_reforward(tiny) -> None:  # noqa: ANN001
    family, _, adapter, processor = tiny
    samples = encode_samples(adapter, processor, _items(family))
    selections = _random(samples, 0.25, seed=3)
    kept = build_context(adapter, samples, selections).kept_visual.tolist()
    assert len(set(kept)) == len(kept)  # different kept counts, so the rows are left-padded differently
    steps = 8
    engine = DecodeEngine(adapter, processor.tokenizer, default_engine())
    cached = engine.generate(
        pruned_prompts(adapter, samples, selections), SamplingConfig(steps, False, 1.0, 1.0, 0, [])
    )
    produced = [torch.zeros(0, dtype=torch.long) for _ in samples]
    for _ in range(steps):
        ctx = build_context(adapter, samples, selections, produced)
        nxt = adapter.logits(adapter.run_llm(ctx.inputs, None)[:, -1]).argmax(-1)
        produced = [torch.cat([p, n[None]]) for p, n in zip(produced, nxt, strict=True)]
    for gen, ref in zip(cached, produced, strict=True):
        assert gen.token_ids.numel() == steps
        assert gen.token_ids.tolist() == ref.tolist()


@torch.no_grad()
def test_three_budgets_run_the_vision_tower_once(tiny) -> None:  # noqa: ANN001
    family, _, adapter, processor = tiny
    before = adapter.vision_calls
    samples = encode_samples(adapter, processor, _items(family))
    for budget in (0.1, 0.11, 1.0):
        build_context(adapter, samples, _random(samples, budget, seed=0))
    assert adapter.vision_calls - before == 1


@pytest.mark.parametrize("name", PRE_LLM)
@torch.no_grad()
def test_every_pre_llm_pruner_keeps_exactly_k_per_image(name: str, tiny) -> None:  # noqa: ANN001
    family, _, adapter, processor = tiny
    params = OmegaConf.to_container(OmegaConf.load(CONF / f"{name}.yaml"))["params"]
    adapter.vision_signals = declared_signals(name, params, seed=0)
    try:
        samples = encode_samples(adapter, processor, _items(family))
    finally:
        adapter.vision_signals = declared_signals("random", {}, seed=0)
    width = adapter.model.config.get_text_config().hidden_size
    for budget in (0.05, 0.3, 1.0):
        gen = torch.Generator().manual_seed(1)
        for sample in samples:
            for image in sample.images:
                n = image.num_tokens
                assert image.attention_received.shape == (n,) and image.embeds.shape == (n, width)
                assert torch.isfinite(image.keys).all() and image.attention_received.sum() > 0
                selection = select_tokens(name, image, sample.question_embeds, budget, gen, params)
                k = min(max(round(budget * n), 1), n)  # clamp(round(b N), 1, N), design invariant 4
                assert selection.indices.numel() == k and selection.embeds.shape == (k, width)
