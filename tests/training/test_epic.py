"""EPIC (token consistency distillation): the teacher's own milder-budget selection, the combined
α·KL + (1 − α)·CE loss against a float64 brute force, the loop's teacher budget, and the config errors."""

from __future__ import annotations

import pytest
import torch

from sparsectx.budget import tokens_to_keep
from sparsectx.context import build_context
from sparsectx.generation import response_logits
from sparsectx.training.config import load_train_config
from sparsectx.training.contexts import prepare_step, select_images
from sparsectx.training.loop import train_step
from sparsectx.training.steps import StepCounts, micro_loss
from sparsectx.training.student import mode
from sparsectx.training.update import step_budget, step_teacher_budget

from .test_loop_support import (
    TinyEnv,
    compose_train,
    make_trainer,
    shared_env,
    train_overrides,
    training_items,
)
from .test_teachers import fresh_student


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


def epic_config(env, tmp_path, *overrides: str):  # noqa: ANN001, ANN201
    """Returns the checked train config of the epic preset with ``overrides``."""
    return load_train_config(compose_train([*train_overrides(env, tmp_path), "method=epic", *overrides]))


def prepared(env, tmp_path, *overrides: str, budget: float = 0.3, teacher_budget: float = 0.7):  # noqa: ANN001, ANN201
    """Returns (cfg, perturbed student, the one micro-batch of two items) at the given budgets."""
    cfg = epic_config(env, tmp_path, *overrides)
    student, _ = fresh_student("qwen2_5_vl", cfg.method, tmp_path)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():  # LoRA B != 0 and large: the pruned contexts' outputs differ clearly
        for p in student.trainable.values():
            p.copy_(0.3 * torch.randn(p.shape, generator=generator))
    generator = torch.Generator().manual_seed(0)
    (mb,) = prepare_step(cfg, student, [(training_items(2), [0, 1])], budget, generator, teacher_budget=teacher_budget)
    return cfg, student, mb


@pytest.mark.parametrize("pruner", ["visionzip", "random"])
def test_teacher_context_is_the_pruner_choice_at_the_milder_budget(pruner: str, tiny_env, tmp_path) -> None:  # noqa: ANN001
    cfg, _, mb = prepared(tiny_env, tmp_path, f"pruner={pruner}")
    assert mb.teacher_selections is not None
    for i, (sample, student_sel, teacher_sel) in enumerate(
        zip(mb.encoded, mb.selections, mb.teacher_selections, strict=True)
    ):
        again = select_images(cfg, sample, 0.7, i)  # EPIC re-runs its pruner at the teacher's ratio
        for image, a, b, c in zip(sample.images, student_sel, teacher_sel, again, strict=True):
            assert b.indices.numel() == tokens_to_keep(0.7, image.num_tokens) > a.indices.numel()
            assert torch.equal(b.indices, c.indices) and torch.equal(b.embeds, c.embeds)
    # Without a budget gap the teacher keeps every visual token (the other presets).
    (plain,) = prepare_step(
        cfg,
        fresh_student("qwen2_5_vl", cfg.method, tmp_path)[0],
        [(training_items(1), [0])],
        0.3,
        torch.Generator().manual_seed(0),
    )
    assert plain.teacher_selections is None


@pytest.mark.parametrize("alpha", [0.5, 0.3, 1.0, 0.0])
def test_loss_is_alpha_kl_plus_one_minus_alpha_ce(alpha: float, tiny_env, tmp_path) -> None:  # noqa: ANN001
    cfg, student, mb = prepared(tiny_env, tmp_path, f"method.distill_weight={alpha}")
    counts = StepCounts(sequences=int((mb.planned > 0).sum()), tokens=int(mb.planned.sum()))
    loss, _ = micro_loss(cfg, student, mb, counts, torch.Generator().manual_seed(0))
    with torch.no_grad(), mode(student.model, training=False):
        s_logits, _ = response_logits(
            student.adapter, build_context(student.adapter, mb.encoded, mb.selections, mb.prefix.tokens)
        )
        t_logits, _ = response_logits(  # the same weights at the teacher's own milder selection
            student.adapter,
            build_context(student.adapter, mb.teacher_encoded, mb.teacher_selections, mb.prefix.tokens),
        )
    lp = torch.log_softmax(s_logits.double(), dim=-1)
    lq = torch.log_softmax(t_logits.double(), dim=-1)
    kl = (lq.exp() * (lq - lp)).sum(-1)  # KL(teacher‖student) per position
    ce = -lp.gather(-1, mb.ids.unsqueeze(-1)).squeeze(-1)
    valid = mb.valid
    want = (alpha * kl[valid] + (1 - alpha) * ce[valid]).sum() / valid.sum()
    assert kl[valid].min() > 0  # the teacher's context differs, so the KD term is not trivially 0
    # The tiny model's KL is ~1e-5 against a CE of ~2: alpha = 1 checks the KD term on its own scale.
    assert float(loss.detach()) == pytest.approx(float(want), rel=1e-4, abs=1e-9)


def test_the_loop_gives_the_teacher_b_plus_the_growing_gap(tiny_env, tmp_path) -> None:  # noqa: ANN001
    trainer = make_trainer(tiny_env, tmp_path, "method=epic", "steps=10")
    for step in (0, 2, 4, 8):
        trainer.step = step
        budget = step_budget(trainer)
        p = step / 10
        hard, easy = 0.9 - (0.9 - 0.1) * p, 0.9 - 0.25 * (0.9 - 0.1) * p  # rescaled to end at budget 0.1
        assert hard - 1e-12 <= budget <= easy + 1e-12
        assert step_teacher_budget(trainer, budget) == pytest.approx(min(1.0, budget + min(0.1 + 0.5 * p, 0.3)))
    trainer.cfg.method.teacher.budget_gap = None
    assert step_teacher_budget(trainer, 0.3) is None


def test_a_step_logs_the_teachers_kept_share(tiny_env, tmp_path) -> None:  # noqa: ANN001
    """train/teacher_kept_visual_fraction: EPIC's teacher keeps more than the student, a full-context one all."""
    trainer = make_trainer(tiny_env, tmp_path / "epic", "method=epic", "steps=10")
    trainer.step = 8  # late in the schedule: the student near b, the teacher at most b + 0.3 (step 0: both ~1)
    metrics, _, _ = train_step(trainer)
    student, teacher = metrics["train/kept_visual_fraction"], metrics["train/teacher_kept_visual_fraction"]
    assert student < teacher < 1.0
    metrics, _, _ = train_step(make_trainer(tiny_env, tmp_path / "scopd", "method=scopd"))
    assert metrics["train/teacher_kept_visual_fraction"] == 1.0


@pytest.mark.parametrize(
    ("override", "match"),
    [
        (
            "method.schedule.params.epic_progressive.start_budget=0.05",
            "final_budget=0.26 is above start_budget",
        ),
        ("method.distill_weight=1.5", r"method.distill_weight=1.5 must lie in \[0, 1\]"),
        ("method.distill_weight=-0.1", r"method.distill_weight=-0.1 must lie in \[0, 1\]"),
        ("method.teacher.budget_gap.start=0.0", "budget_gap.start=0.0 must be > 0"),
        ("method.teacher.budget_gap.max=1.0", r"budget_gap.max=1.0 must lie in \[start=0.1, 1\)"),
        (
            "method.teacher.budget_gap.max=0.95",
            "budget_gap.max=0.95 on top of the schedule's lowest budget 0.26",  # EPIC's original window end
        ),
        ("method.schedule.params.epic_progressive.start_budget=1.0", "would not be above the student's"),
        ("method.objective=distill", "method.distill_weight=0.5 must be set exactly when"),
        ("method.prefix=rollout", "set method.prefix=reference"),
    ],
)
def test_bad_epic_settings_fail_before_any_work(override: str, match: str, tiny_env, tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match=match):
        epic_config(tiny_env, tmp_path, override)
