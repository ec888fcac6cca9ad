"""A trained vision tower (``method.train_vision``, LT-OPD App. B) on tiny random-weight models.

References: the adapter's own no-grad encode (the recomputed tower must give the same vectors and the replayed
selections the same kept tokens and vectors), and the initial HF model's own forward (a frozen teacher stays
the initial model, tower included, after the student's tower has moved).
"""

from __future__ import annotations

import pytest
import torch
from family_models import family_model
from qwen3_5_models import tiny_bundle
from tiny_models import char_processor, noise_image, tiny_qwen2_5_vl, tiny_qwen3_vl
from transformers import AutoModelForImageTextToText

from sparsectx.context import build_context
from sparsectx.data import write_tsv
from sparsectx.encoding import encode_samples
from sparsectx.generation import response_logits
from sparsectx.models import adapter_for
from sparsectx.prompting import PromptItem, processor_inputs
from sparsectx.pruning import select_tokens
from sparsectx.pruning.config import PrunerConfig
from sparsectx.training.config import load_train_config
from sparsectx.training.contexts import micro_contexts
from sparsectx.training.loop import run
from sparsectx.training.prefetch import host_inputs
from sparsectx.training.teachers import teacher_logits
from sparsectx.training.vision_training import VisionInputs, trained_inputs
from training.test_loop_support import (
    TinyEnv,
    compose_train,
    make_trainer,
    shared_env,
    train_overrides,
    training_items,
)


@pytest.fixture
def env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny Qwen2.5-VL directory and training TSV."""
    return shared_env(tmp_path_factory)


PRUNERS = {
    "visionzip": {"contextual_fraction": 0.5},  # merges: replayed by a re-run on the recorded signals
    "divprune": {},  # chooses from the vectors themselves: replayed as a gather
}


def _family(name: str, tmp):  # noqa: ANN001, ANN202
    """Returns (adapter, processor, patch) of a tiny random ``name`` model (fp32, CPU)."""
    if name in ("qwen2_5_vl", "qwen3_vl"):
        patch = 14 if name == "qwen2_5_vl" else 16
        processor = char_processor(patch, tmp)
        build = tiny_qwen2_5_vl if name == "qwen2_5_vl" else tiny_qwen3_vl
        return adapter_for(build(processor.tokenizer, seed=0), signal_chunk=8), processor, patch
    if name == "qwen3_5":
        bundle = tiny_bundle(tmp)
        return bundle.adapter, bundle.processor, bundle.patch
    model, processor = family_model(name, tmp)
    return adapter_for(model, signal_chunk=8), processor, 14


@pytest.mark.parametrize("pruner", sorted(PRUNERS))
@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl", "qwen3_5", "glm46v"])
def test_the_recomputed_tower_keeps_the_tokens_and_carries_gradients(family, pruner, tmp_path) -> None:
    adapter, processor, patch = _family(family, tmp_path)
    prompts = [
        PromptItem("a", [noise_image(patch * 8, patch * 6, 1)], "what colour?", "sys", ""),
        PromptItem("b", [noise_image(patch * 4, patch * 6, 2), noise_image(patch * 6, patch * 4, 3)], "same?", "s", ""),
    ]
    batch = processor_inputs(processor, prompts)
    with torch.no_grad():
        samples = encode_samples(adapter, processor, prompts, batch)
    config = PrunerConfig(pruner, "pre_llm", PRUNERS[pruner])
    selections = [
        [select_tokens(pruner, im, s.question_embeds, 0.4, torch.Generator(), config.params) for im in s.images]
        for s in samples
    ]
    vision = VisionInputs(batch["pixel_values"], batch["image_grid_thw"])
    new_samples, replayed = trained_inputs(adapter, config, samples, selections, vision)
    for old, new in zip(sum(selections, []), sum(replayed, []), strict=True):
        assert torch.equal(old.indices, new.indices)
        torch.testing.assert_close(new.embeds, old.embeds, atol=1e-5, rtol=0)
        assert new.embeds.requires_grad and len(new.deepstack) == len(old.deepstack)
        for a, b in zip(old.deepstack, new.deepstack, strict=True):
            torch.testing.assert_close(b, a, atol=1e-5, rtol=0)
    logits, _ = response_logits(adapter, build_context(adapter, new_samples, replayed, [torch.tensor([5, 6, 7])] * 2))
    logits.float().square().mean().backward()
    tower = [p for name, p in adapter.model.named_parameters() if ".visual." in f".{name}"]
    assert tower and all(p.grad is not None for p in tower[:1] + tower[-1:])
    assert any(float(p.grad.abs().sum()) > 0 for p in tower if p.grad is not None)


def _vision_params(model) -> dict[str, torch.Tensor]:  # noqa: ANN001
    return {n: p.detach().clone() for n, p in model.named_parameters() if ".visual." in f".{n}"}


@pytest.mark.parametrize("train_vision", [True, False])
def test_lt_opd_updates_the_tower_only_when_asked(env, tmp_path, train_vision) -> None:  # noqa: ANN001
    overrides = [
        *train_overrides(env, tmp_path),
        "method=lt_opd",
        "steps=1",
        "method.optim.warmup_steps=0",
        "method.optim.lr=1e-3",
        f"method.train_vision={str(train_vision).lower()}",
    ]
    before = _vision_params(AutoModelForImageTextToText.from_pretrained(env.model_dir))
    result = run(compose_train(overrides))
    after = _vision_params(AutoModelForImageTextToText.from_pretrained(result.checkpoint))
    moved = [n for n in before if not torch.equal(before[n], after[n])]
    if train_vision:
        assert any(".blocks." in n for n in moved) and any(".merger." in n for n in moved)
    else:
        assert moved == []


def test_a_frozen_teacher_keeps_the_initial_tower(env, tmp_path) -> None:  # noqa: ANN001
    # make_trainer moves every trainable tensor, the tower's included, away from the initial model.
    trainer = make_trainer(env, tmp_path, "method=lt_opd")
    student, cfg = trainer.student, trainer.cfg
    assert any(".visual." in f".{name}" for name in student.trainable)
    items = trainer.data.items[:2]
    ctx = micro_contexts(cfg, student, items, [0, 1], 0.5)
    assert ctx.vision is not None
    encode = student.processor.tokenizer
    responses = [encode(text, add_special_tokens=False, return_tensors="pt").input_ids[0] for text in ("abc", "xyz")]
    ours = teacher_logits(student, "frozen", ctx.teacher_encoded, responses, vision=ctx.vision)
    stale = teacher_logits(student, "frozen", ctx.teacher_encoded, responses)  # the student's moved tower
    initial = AutoModelForImageTextToText.from_pretrained(env.model_dir).eval()
    prompts = host_inputs(cfg, student.processor, (items, [0, 1]), pin=False).prompts
    batch = processor_inputs(student.processor, prompts)
    ids = torch.cat([batch["input_ids"], torch.stack(responses)], dim=1)
    mask = torch.cat([batch["attention_mask"], torch.ones(2, 3, dtype=torch.long)], dim=1)
    types = torch.cat([batch["mm_token_type_ids"], torch.zeros(2, 3, dtype=torch.long)], dim=1)
    pixels = {"pixel_values": batch["pixel_values"], "image_grid_thw": batch["image_grid_thw"]}
    with torch.no_grad():
        full = initial(input_ids=ids, attention_mask=mask, mm_token_type_ids=types, **pixels).logits
    length = batch["input_ids"].shape[1]
    reference = full[:, length - 1 : length + 2]
    torch.testing.assert_close(ours, reference, atol=1e-4, rtol=0)
    assert float((stale - reference).abs().max()) > 1e-2


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["method=scopd", "method.train_vision=true"],
            r"method\.train_vision=true with method\.lora\.enabled",
        ),
        (["method=grpo", "method.lora.enabled=false", "method.train_vision=true"], r"objective='rl'"),
    ],
)
def test_train_vision_refusals_name_the_key(env, tmp_path, extra, message) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match=message):
        load_train_config(compose_train([*train_overrides(env, tmp_path), *extra]))


def test_a_family_whose_tower_is_not_trained_here_is_refused(tmp_path) -> None:
    model, _ = family_model("llava_onevision", tmp_path / "model")
    model.save_pretrained(tmp_path / "model")
    write_tsv(tmp_path / "train.tsv", training_items(2))
    env = TinyEnv(tmp_path / "model", tmp_path / "train.tsv")
    with pytest.raises(ValueError, match=r"method\.train_vision=true is supported on .* not 'llava_onevision'"):
        make_trainer(env, tmp_path / "runs", "method=lt_opd", "model.tile_budget=pooled")
