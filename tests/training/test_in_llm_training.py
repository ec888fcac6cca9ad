"""Training with an in-LLM pruner (issue 16 item 3; EPIC trains with DART/FastV at an early layer): the
selections are in-LLM ones at every budget the step uses, the rollout's selection is its training forward's,
the student's gradient through the drop equals the key-masking oracle's, and K is checked before loading."""

from __future__ import annotations

import pytest
import torch
from key_masking import causal_key_bias, kept_keys

import sparsectx.training.loop as loop
from sparsectx.budget import tokens_to_keep
from sparsectx.context import build_context, keep_all
from sparsectx.generation import response_logprobs
from sparsectx.layer_selection import LayerSelection
from sparsectx.pruning.layer import select_in_llm
from sparsectx.training.config import load_train_config
from sparsectx.training.contexts import prepare_step
from sparsectx.training.loop import train_step

from .test_loop_support import (
    TinyEnv,
    compose_train,
    make_trainer,
    shared_env,
    train_overrides,
    training_items,
)
from .test_teachers import fresh_student

IN_LLM = {"fastv": ["pruner=fastv", "pruner.layer=1"], "dart": ["pruner=dart", "pruner.layer=1"]}


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny (2-layer LLM) model directory and training TSV."""
    return shared_env(tmp_path_factory)


@pytest.mark.parametrize("name", sorted(IN_LLM))
def test_epic_student_and_teacher_select_in_the_llm(name, tiny_env, tmp_path) -> None:  # noqa: ANN001
    overrides = [*train_overrides(tiny_env, tmp_path), "method=epic", *IN_LLM[name]]
    cfg = load_train_config(compose_train(overrides))
    student, _ = fresh_student("qwen2_5_vl", cfg.method, tmp_path)
    generator = torch.Generator().manual_seed(0)
    (mb,) = prepare_step(cfg, student, [(training_items(2), [0, 1])], 0.3, generator, teacher_budget=0.7)
    for budget, chosen in ((0.3, mb.selections), (0.7, mb.teacher_selections)):
        again = select_in_llm(student.adapter, mb.encoded, name, budget, cfg.pruner.params, 1)
        for sample, sel, ref in zip(mb.encoded, chosen, again, strict=True):
            for image, s, r in zip(sample.images, sel, ref, strict=True):
                assert isinstance(s, LayerSelection) and s.layer == 1
                assert s.indices.numel() == tokens_to_keep(budget, image.num_tokens)
                assert torch.equal(s.indices, r.indices)


@pytest.mark.parametrize("name", sorted(IN_LLM))
def test_a_training_step_prunes_in_the_llm_and_updates_the_student(name, tiny_env, tmp_path) -> None:  # noqa: ANN001
    trainer = make_trainer(tiny_env, tmp_path, "method=scopd", *IN_LLM[name])
    before = {k: p.detach().clone() for k, p in trainer.student.trainable.items()}
    metrics, micro, budget = train_step(trainer)
    assert 0 < metrics["train/kept_visual_fraction"] < 1
    for mb in micro:
        for sample, sel in zip(mb.encoded, mb.selections, strict=True):
            for image, s in zip(sample.images, sel, strict=True):
                assert isinstance(s, LayerSelection) and s.indices.numel() == tokens_to_keep(budget, image.num_tokens)
    assert torch.isfinite(torch.tensor(metrics["train/loss"]))
    assert any(not torch.equal(before[k], p.detach()) for k, p in trainer.student.trainable.items())


def _key_masked(adapter, samples, selections, responses, layer):  # noqa: ANN001, ANN202
    """Returns response log-probs of the full context with the dropped tokens masked as keys in layers >= K."""
    full = build_context(adapter, samples, [keep_all(s) for s in samples], responses)
    bias = causal_key_bias(kept_keys(adapter, samples, selections, full.inputs.attention_mask.bool()))
    hooks = [
        block.register_forward_pre_hook(lambda m, a, k: (a, {**k, "attention_mask": bias}), with_kwargs=True)
        for block in adapter.language_model.layers[layer:]
    ]
    try:
        return response_logprobs(adapter, full, responses)
    finally:
        for hook in hooks:
            hook.remove()


@pytest.mark.parametrize("name", sorted(IN_LLM))
def test_student_gradient_through_the_drop_equals_the_key_masking_oracle(name, tiny_env, tmp_path) -> None:  # noqa: ANN001
    cfg = load_train_config(compose_train([*train_overrides(tiny_env, tmp_path), "method=scopd", *IN_LLM[name]]))
    student, _ = fresh_student("qwen2_5_vl", cfg.method, tmp_path)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in student.trainable.values():
            p.copy_(0.3 * torch.randn(p.shape, generator=generator))
    (mb,) = prepare_step(cfg, student, [(training_items(2), [0, 1])], 0.3, torch.Generator().manual_seed(0))
    responses = [t for t in mb.prefix.tokens]
    grads = []
    for forward in ("pruned", "masked"):
        student.model.zero_grad()
        if forward == "pruned":
            batch = build_context(student.adapter, mb.encoded, mb.selections, responses)
            logp, mask = response_logprobs(student.adapter, batch, responses)
        else:
            logp, mask = _key_masked(student.adapter, mb.encoded, mb.selections, responses, 1)
        logp[mask].sum().backward()
        grads.append({k: p.grad.detach().clone() for k, p in student.trainable.items()})
    for key in grads[0]:
        torch.testing.assert_close(grads[0][key], grads[1][key], atol=1e-4, rtol=1e-3)
    assert any(g.abs().max() > 0 for g in grads[0].values())


def test_layer_at_the_llm_depth_fails_before_the_model_loads(tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    def no_load(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the model was loaded before the config error")

    monkeypatch.setattr(loop, "load_model", no_load)
    cfg = compose_train([*train_overrides(tiny_env, tmp_path), "method=scopd", "pruner=fastv", "pruner.layer=2"])
    with pytest.raises(ValueError, match=r"pruner.layer=2 is outside \[1, 1\]"):
        loop.run(cfg)


@pytest.mark.parametrize("name", sorted(IN_LLM))
def test_the_rollout_decodes_from_the_selection_its_training_forward_uses(name, tiny_env, tmp_path, monkeypatch):  # noqa: ANN001
    import sparsectx.training.rollout as rollout

    seen = []

    def spy(adapter, samples, selections):  # noqa: ANN001, ANN202
        seen.append(selections)
        return rollout_prompts(adapter, samples, selections)

    rollout_prompts = rollout.pruned_prompts
    monkeypatch.setattr(rollout, "pruned_prompts", spy)
    cfg = load_train_config(compose_train([*train_overrides(tiny_env, tmp_path), "method=scopd", *IN_LLM[name]]))
    student, _ = fresh_student("qwen2_5_vl", cfg.method, tmp_path)
    (mb,) = prepare_step(cfg, student, [(training_items(2), [0, 1])], 0.3, torch.Generator().manual_seed(0))
    assert len(seen) == 1 and len(seen[0]) == len(mb.selections)
    for rolled, trained in zip(seen[0], mb.selections, strict=True):
        assert all(a is b and isinstance(a, LayerSelection) for a, b in zip(rolled, trained, strict=True))


def test_activation_checkpointing_gives_the_same_step_through_the_drop(tiny_env, tmp_path) -> None:  # noqa: ANN001
    """memory.activation_checkpointing recomputes the in-LLM forward in backward: the same loss and update."""
    results = []
    for flag in ("false", "true"):
        trainer = make_trainer(
            tiny_env,
            tmp_path / flag,
            "method=scopd",
            *IN_LLM["fastv"],
            f"memory.activation_checkpointing={flag}",
        )
        metrics, _, _ = train_step(trainer)
        results.append((metrics["train/loss"], {k: p.detach().clone() for k, p in trainer.student.trainable.items()}))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-5)
    for key, value in results[0][1].items():
        torch.testing.assert_close(value, results[1][1][key], atol=1e-6, rtol=1e-5)


def test_a_reuse_step_keeps_the_generation_steps_in_llm_selection(tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """GRPO with num_iterations = 2: step 2 scores step 1's rollouts on step 1's kept tokens, not on a new
    choice by the moved weights (an in-LLM selection depends on them)."""
    import sparsectx.training.contexts as contexts

    calls = []
    real = contexts.select_in_llm
    monkeypatch.setattr(contexts, "select_in_llm", lambda *a, **k: calls.append(1) or real(*a, **k))
    trainer = make_trainer(
        tiny_env,
        tmp_path,
        "method=grpo",
        "method.rl.group_size=2",
        "method.rl.num_iterations=2",
        "method.optim.lr=0.05",
        *IN_LLM["dart"],
    )
    _, first, _ = train_step(trainer)
    generated = len(calls)
    _, second, _ = train_step(trainer)
    assert generated >= 1 and len(calls) == generated  # the reuse step selects nothing anew
    for a, b in zip(first, second, strict=True):
        for sel_a, sel_b in zip(a.selections, b.selections, strict=True):
            for s_a, s_b in zip(sel_a, sel_b, strict=True):
                assert isinstance(s_b, LayerSelection) and s_b.layer == s_a.layer
                assert torch.equal(s_a.indices, s_b.indices) and torch.equal(s_a.embeds, s_b.embeds)
