"""Teachers: the LoRA frozen teacher is the un-adapted model, the EMA swap restores the student exactly,
gradients reach only the student, and the teacher's privileged prompt reuses the student's encoding."""

from __future__ import annotations

import copy

import pytest
import torch
from tiny_models import char_processor, noise_image, tiny_qwen2_5_vl, tiny_qwen3_vl

from sparsectx.context import build_context, keep_all
from sparsectx.encoding import encode_samples
from sparsectx.generation import response_logits
from sparsectx.models import LoadedModel, adapter_for
from sparsectx.prompting import PromptItem
from sparsectx.training.batches import reencode_text, reference_text, with_reference
from sparsectx.training.config import load_train_config
from sparsectx.training.contexts import nested_union, prepare_step, select_images
from sparsectx.training.method import MethodConfig
from sparsectx.training.prefetch import host_inputs
from sparsectx.training.steps import StepCounts, micro_loss
from sparsectx.training.student import Student, build_student
from sparsectx.training.teachers import teacher_logits
from sparsectx.visual import Selection

from .test_loop_support import TinyEnv, compose_train, shared_env, train_overrides, training_items


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


BUILDERS = {"qwen2_5_vl": (tiny_qwen2_5_vl, 14), "qwen3_vl": (tiny_qwen3_vl, 16)}


def method_config(env, tmp_path, *overrides: str) -> MethodConfig:  # noqa: ANN001
    """Returns the checked method config of ``conf/train.yaml`` with ``overrides``."""
    return load_train_config(compose_train([*train_overrides(env, tmp_path), *overrides])).method


def fresh_student(family: str, method: MethodConfig, tmp_path) -> tuple[Student, torch.nn.Module]:  # noqa: ANN001
    """Returns a Student on a new tiny model of ``family`` and an untouched deep copy of the initial model."""
    build, patch = BUILDERS[family]
    processor = char_processor(patch, tmp_path / family)
    model = build(processor.tokenizer, seed=0)
    initial = copy.deepcopy(model)
    return build_student(LoadedModel(adapter_for(model, 8), processor), method, 8), initial


def perturb_(params: dict[str, torch.nn.Parameter], seed: int) -> None:
    """Fills every tensor with seeded noise (so LoRA B != 0 and the adapters change the output)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params.values():
            p.copy_(0.05 * torch.randn(p.shape, generator=generator))


def context(student: Student, patch: int, text: str = "a"):  # noqa: ANN201
    """Returns (encoded samples, full-context responses) of two prompts on ``student``."""
    items = [
        PromptItem(f"s{i}", [noise_image(patch * 8, patch * 6, seed=i)], f"q{i}?", "sys", "think", "") for i in range(2)
    ]
    encoded = encode_samples(student.adapter, student.processor, items)
    responses = [torch.tensor([5, 6, 7]), torch.tensor([8, 9])]
    return encoded, responses


@pytest.mark.parametrize("family", sorted(BUILDERS))
def test_lora_frozen_teacher_is_the_unadapted_model(family: str, tiny_env, tmp_path) -> None:  # noqa: ANN001
    method = method_config(tiny_env, tmp_path, "method=scopd_teacher_fixed")
    student, initial = fresh_student(family, method, tmp_path)
    perturb_(student.trainable, seed=1)
    encoded, responses = context(student, BUILDERS[family][1])
    teacher = teacher_logits(student, "frozen", encoded, responses)
    base = adapter_for(initial, 8)
    with torch.no_grad():
        want, _ = response_logits(base, build_context(base, encoded, [keep_all(s) for s in encoded], responses))
        adapted, _ = response_logits(
            student.adapter,
            build_context(student.adapter, encoded, [keep_all(s) for s in encoded], responses),
        )
    assert torch.equal(teacher, want)
    assert not torch.allclose(adapted, want, atol=1e-4)  # the adapters are live outside the teacher view
    assert not teacher.requires_grad


def test_lora_scope_is_language_model_only(tiny_env, tmp_path) -> None:  # noqa: ANN001
    method = method_config(tiny_env, tmp_path, "method=scopd")
    for family in BUILDERS:
        student, _ = fresh_student(family, method, tmp_path)
        names = list(student.trainable)
        assert len(names) == 2 * 7 * 2  # 2 decoder layers x 7 projections x (A, B)
        assert all(".language_model.layers." in n and ".lora_" in n for n in names)
        assert not any("visual" in n for n in names)


def test_ema_teacher_swaps_in_the_average_and_restores_the_student(tiny_env, tmp_path) -> None:  # noqa: ANN001
    method = method_config(tiny_env, tmp_path, "method=scopd", "method.teacher.ema_decay=0.5")
    student, _ = fresh_student("qwen2_5_vl", method, tmp_path)
    encoded, responses = context(student, 14)
    before_init = teacher_logits(student, "ema", encoded, responses)  # lazy init: teacher = current student
    live, _ = response_logits(
        student.adapter, build_context(student.adapter, encoded, [keep_all(s) for s in encoded], responses)
    )
    assert torch.equal(before_init, live.detach())
    perturb_(student.trainable, seed=1)
    student.ema.update(student.trainable)  # lazy copy of the perturbed weights
    snapshot = {n: p.detach().clone() for n, p in student.trainable.items()}
    perturb_(student.trainable, seed=2)
    current = {n: p.detach().clone() for n, p in student.trainable.items()}
    got = teacher_logits(student, "ema", encoded, responses)
    assert all(torch.equal(p, current[n]) for n, p in student.trainable.items())  # restored bit-exactly
    with torch.no_grad():
        for n, p in student.trainable.items():
            p.copy_(snapshot[n])
        want, _ = response_logits(
            student.adapter,
            build_context(student.adapter, encoded, [keep_all(s) for s in encoded], responses),
        )
    assert torch.equal(got, want)


def test_full_parameter_frozen_teacher_is_a_separate_copy(tiny_env, tmp_path) -> None:  # noqa: ANN001
    # The language model alone trains here; with the tower trained too see test_train_vision.py.
    method = method_config(tiny_env, tmp_path, "method=lt_opd", "method.train_vision=false")
    student, initial = fresh_student("qwen2_5_vl", method, tmp_path)
    assert student.peft is None and student.frozen is not None
    assert not any("visual" in n for n in student.trainable)
    perturb_(student.trainable, seed=3)  # the student moved; the teacher must not
    encoded, responses = context(student, 14)
    got = teacher_logits(student, "frozen", encoded, responses)
    base = adapter_for(initial, 8)
    with torch.no_grad():
        want, _ = response_logits(base, build_context(base, encoded, [keep_all(s) for s in encoded], responses))
    assert torch.equal(got, want)


@pytest.mark.parametrize("method", ["scopd_plus", "scopd_gt", "lt_opd"])
def test_gradients_reach_only_the_student(method: str, tiny_env, tmp_path) -> None:  # noqa: ANN001
    cfg = load_train_config(compose_train([*train_overrides(tiny_env, tmp_path), f"method={method}"]))
    student, _ = fresh_student("qwen2_5_vl", cfg.method, tmp_path)
    perturb_(student.trainable, seed=4)
    if student.ema is not None:
        student.ema.update(student.trainable)
    items = training_items(2)
    generator = torch.Generator().manual_seed(0)
    (mb,) = prepare_step(cfg, student, [(items, [0, 1])], cfg.budget, generator)
    counts = StepCounts(sequences=int((mb.planned > 0).sum()), tokens=int(mb.planned.sum()))
    loss, _ = micro_loss(cfg, student, mb, counts, generator)
    loss.backward()
    trainable = set(student.trainable)
    for name, param in student.model.named_parameters():
        if name in trainable:
            assert param.grad is not None and torch.isfinite(param.grad).all(), name
        else:
            assert param.grad is None, name
    if student.frozen is not None:
        assert all(p.grad is None and not p.requires_grad for p in student.frozen.model.parameters())
    if student.ema is not None:
        assert all(not t.requires_grad for t in student.ema.shadow().values())


def test_teacher_prompt_reuses_the_student_encoding(tiny_env, tmp_path) -> None:  # noqa: ANN001
    method = method_config(tiny_env, tmp_path, "method=scopd")
    student, _ = fresh_student("qwen2_5_vl", method, tmp_path)
    item = PromptItem("s", [noise_image(112, 84, seed=0)], "q?", "sys", "think", "")
    (sample,) = encode_samples(student.adapter, student.processor, [item])
    calls = student.adapter.vision_calls
    same = reencode_text(student.adapter, student.processor, item, sample)
    assert torch.equal(same.prompt_ids, sample.prompt_ids) and torch.equal(same.positions, sample.positions)
    assert same.next_position == sample.next_position
    longer = reencode_text(
        student.adapter, student.processor, PromptItem(**{**item.__dict__, "extra_context": "ref"}), sample
    )
    assert longer.prompt_ids.numel() > sample.prompt_ids.numel() and longer.images is sample.images
    assert student.adapter.vision_calls == calls  # no second vision-tower run


def test_nested_union_keeps_every_inner_token_and_its_vector() -> None:
    embeds = torch.arange(10.0).repeat_interleave(2).view(10, 2)
    inner = Selection(indices=torch.tensor([1, 4]), embeds=torch.full((2, 2), -1.0))  # merged vectors
    outer = Selection(indices=torch.tensor([0, 4, 7]), embeds=embeds[[0, 4, 7]])
    union = nested_union(inner, outer)
    assert union.indices.tolist() == [0, 1, 4, 7]
    assert torch.equal(
        union.embeds, torch.stack([embeds[0], torch.tensor([-1.0, -1]), torch.tensor([-1.0, -1]), embeds[7]])
    )


@pytest.mark.parametrize("nesting", ["union", "recompute"])
def test_probe_context_is_a_superset_or_the_pruner_choice(nesting: str, tiny_env, tmp_path) -> None:  # noqa: ANN001
    cfg = load_train_config(
        compose_train(
            [
                *train_overrides(tiny_env, tmp_path),
                "method=scopd_plus",
                "method.positions.delta=0.3",
                f"method.positions.probe_nesting={nesting}",
                "pruner=visionzip",
            ]
        )
    )
    student, _ = fresh_student("qwen2_5_vl", cfg.method, tmp_path)
    (mb,) = prepare_step(cfg, student, [(training_items(2), [0, 1])], cfg.budget, torch.Generator().manual_seed(0))
    for sample, inner, outer in zip(mb.encoded, mb.selections, mb.probe_selections, strict=True):
        plus = select_images(cfg, sample, cfg.budget + 0.3, 0 if sample is mb.encoded[0] else 1)
        for a, b, c in zip(inner, outer, plus, strict=True):
            assert b.indices.numel() > a.indices.numel()
            if nesting == "union":
                assert set(a.indices.tolist()) <= set(b.indices.tolist())
            else:
                assert torch.equal(b.indices, c.indices) and torch.equal(b.embeds, c.embeds)


def test_privileged_teacher_scores_the_rollout_as_a_fresh_encoding_of_the_reference_prompt(
    tiny_env,
    tmp_path,  # noqa: ANN001
) -> None:
    """SCOPD+GT: the teacher's logits on the student's rollout equal those of the prompt with the reference
    encoded from scratch (the evaluation path: processor, vision tower, positions), at every response position."""
    cfg = load_train_config(compose_train([*train_overrides(tiny_env, tmp_path), "method=scopd_gt"]))
    student, _ = fresh_student("qwen2_5_vl", cfg.method, tmp_path)
    items = training_items(2)
    (mb,) = prepare_step(cfg, student, [(items, [0, 1])], cfg.budget, torch.Generator().manual_seed(0))
    got = teacher_logits(student, "shared", mb.teacher_encoded, mb.prefix.tokens)

    prompts = host_inputs(cfg, student.processor, (items, [0, 1]), pin=False).prompts
    template = cfg.method.teacher.reference_template
    privileged = [with_reference(p, it, template) for p, it in zip(prompts, items, strict=True)]
    fresh = encode_samples(student.adapter, student.processor, privileged)
    tokenizer = student.processor.tokenizer
    for sample, item in zip(fresh, items, strict=True):
        assert reference_text(item) in tokenizer.decode(sample.prompt_ids)
    adapter = student.adapter
    with torch.no_grad():
        want, _ = response_logits(
            adapter, build_context(adapter, fresh, [keep_all(s) for s in fresh], mb.prefix.tokens)
        )
    assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
