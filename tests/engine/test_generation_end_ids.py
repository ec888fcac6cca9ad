"""The engine ends a turn where HF ``generate`` does: at the model's ``generation_config`` eos ids too.

GLM-4.6V's generation config lists ``<|user|>`` and ``<|observation|>`` beside its tokenizer's eos; the test
declares one of the tiny model's own greedy tokens a generation-config eos and holds the engine to
``generate`` with that config.
"""

from __future__ import annotations

import torch
from engine_setup import default_engine
from family_models import family_model
from tiny_models import noise_image
from transformers import GenerationConfig

from sparsectx.context import keep_all
from sparsectx.encoding import encode_samples
from sparsectx.engine import DecodeEngine, pruned_prompts
from sparsectx.engine.stops import generation_end_ids
from sparsectx.generation import SamplingConfig
from sparsectx.models import adapter_for
from sparsectx.prompting import PromptItem, processor_inputs

NEW = 10


def _greedy(model, batch, pad: int, eos: list[int] | None) -> list[int]:  # noqa: ANN001
    config = GenerationConfig(max_new_tokens=NEW, do_sample=False, eos_token_id=eos, pad_token_id=pad)
    out = model.generate(**batch, generation_config=config)
    return out[0, batch["input_ids"].shape[1] :].tolist()


@torch.no_grad()
def test_the_engine_stops_at_a_generation_config_eos_as_hf_generate_does(tiny_vlm, monkeypatch) -> None:
    adapter, processor = tiny_vlm.adapter, tiny_vlm.processor
    tok, model = processor.tokenizer, tiny_vlm.adapter.model
    items = [PromptItem("0", [noise_image(tiny_vlm.patch * 4, tiny_vlm.patch * 6, 1)], "how many?", "sys", "")]
    batch = processor_inputs(processor, items)
    free = _greedy(model, batch, tok.pad_token_id, None)
    cut = next(i for i in range(2, NEW) if free[i] not in free[:i] and free[i] != tok.eos_token_id)
    ends = [tok.eos_token_id, free[cut]]
    monkeypatch.setattr(model.generation_config, "eos_token_id", ends)
    assert generation_end_ids(model) == set(ends)
    reference = _greedy(model, batch, tok.pad_token_id, ends)
    samples = encode_samples(adapter, processor, items)
    engine = DecodeEngine(adapter, tok, default_engine())
    sampling = SamplingConfig(NEW, False, 1.0, 1.0, 0, [])
    ours = engine.generate(pruned_prompts(adapter, samples, [keep_all(s) for s in samples]), sampling)[0]
    assert ours.token_ids.tolist() == reference[: cut + 1] == free[: cut + 1]
    assert ours.stopped


def test_glm_generation_config_turn_ends_are_read(tmp_path) -> None:
    model, processor = family_model("glm46v", tmp_path)
    get = processor.tokenizer.convert_tokens_to_ids
    model.generation_config.eos_token_id = [get("<|endoftext|>"), get("<|user|>"), get("<|observation|>")]
    engine = DecodeEngine(adapter_for(model, signal_chunk=8), processor.tokenizer, default_engine())
    assert {get("<|user|>"), get("<|observation|>"), get("<|endoftext|>")} <= engine.end_ids
