"""EPIC's layer consistency distillation (LCD, arXiv 2510.00515 §3.4): the deep-to-shallow layer schedule (Eq. 9)
and the fixed uniform budget window (Eq. 10) against hand-written references, a tiny training run whose student
and teacher prune at the step's layer, and the refusal with a pre-LLM pruner (the TCD presets stay as they were).
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from pathlib import Path

import pytest
import torch
from tiny_models import char_processor, tiny_qwen2_5_vl

from sparsectx.budget import tokens_to_keep
from sparsectx.data import write_tsv
from sparsectx.layer_selection import LayerSelection
from sparsectx.training import BUDGET_SCHEDULES, LAYER_SCHEDULES
from sparsectx.training.config import load_train_config
from sparsectx.training.loop import train_step
from sparsectx.training.update import step_layer

from .test_loop_support import TinyEnv, compose_train, make_trainer, train_overrides, training_items

LCD = LAYER_SCHEDULES.get("epic_deep_to_shallow")


def paper_layer(step: int, total: int, depth: int, shallowest: int) -> int:
    """Returns Eq. 9's ℓ_t = Round(L − β_t(L − ℓ_min)), β_t = t/T (capped at 1), rounded half up, in exact decimals."""
    beta = min(Fraction(step, total), Fraction(1))
    value = depth - beta * (depth - shallowest)
    exact = Decimal(value.numerator) / Decimal(value.denominator)
    return int(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP))


# Hand-computed from Eq. 9: (step, total steps, L, ℓ_min) -> ℓ_t. L = 28 is Qwen2.5-VL-7B's LLM, 32 EPIC's
# Vicuna-7B, 4 the tiny test model; ℓ_min = 2 is EPIC's DART/FastV layer.
HAND = [
    (0, 100, 28, 2, 28),  # β = 0: the deepest layer, ℓ_0 = L
    (1, 100, 28, 2, 28),  # 27.74
    (2, 100, 28, 2, 27),  # 27.48
    (10, 100, 28, 2, 25),  # 25.4
    (25, 100, 28, 2, 22),  # 21.5: a tie, half up
    (50, 100, 28, 2, 15),  # 15
    (75, 100, 28, 2, 9),  # 8.5: a tie, half up
    (98, 100, 28, 2, 3),  # 2.52
    (99, 100, 28, 2, 2),  # 2.26
    (100, 100, 28, 2, 2),  # β = 1: ℓ_T = ℓ_min
    (150, 100, 28, 2, 2),  # past the end: held at ℓ_min
    (1, 60, 32, 2, 32),  # 31.5: a tie, half up
    (30, 60, 32, 2, 17),  # 17
    (59, 60, 32, 2, 3),  # 2.5: a tie, half up
    (2, 8, 4, 2, 4),  # 3.5: a tie, half up
    (3, 8, 4, 2, 3),  # 3.25
    (7, 8, 4, 2, 2),  # 2.25
    (5, 6, 4, 1, 2),  # 1.5: a tie, half up
]


@pytest.mark.parametrize(("step", "total", "depth", "shallowest", "want"), HAND)
def test_layer_schedule_is_eq_9_at_hand_computed_points(step, total, depth, shallowest, want) -> None:  # noqa: ANN001
    assert paper_layer(step, total, depth, shallowest) == want  # the reference agrees with the hand values
    assert LCD(step, total_steps=total, num_layers=depth, final_layer=shallowest) == want


@pytest.mark.parametrize(("total", "depth", "shallowest"), [(313, 28, 2), (1000, 36, 2), (7, 4, 1), (1, 2, 1)])
def test_layer_schedule_moves_deep_to_shallow_through_every_layer(total: int, depth: int, shallowest: int) -> None:
    layers = [LCD(s, total_steps=total, num_layers=depth, final_layer=shallowest) for s in range(total + 1)]
    assert layers == [paper_layer(s, total, depth, shallowest) for s in range(total + 1)]
    assert layers[0] == depth and layers[-1] == shallowest
    assert all(a >= b for a, b in zip(layers, layers[1:], strict=False))  # never moves back deeper
    if total >= 2 * (depth - shallowest):  # enough steps: no layer is skipped
        assert set(layers) == set(range(shallowest, depth + 1))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_layers": 4, "final_layer": 4}, r"pruner.layer=4 .* outside \[1, 3\]"),
        ({"num_layers": 4, "final_layer": 0}, r"pruner.layer=0 .* outside \[1, 3\]"),
        ({"num_layers": 4, "final_layer": 2.0}, "final_layer=2.0 must be an int"),
    ],
)
def test_layer_schedule_refuses_an_end_outside_the_llm(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LCD(0, total_steps=10, **kwargs)


def test_uniform_window_is_eq_10_every_step() -> None:
    """budget = 1 − r, r = random.uniform(r_min, r_max) = r_min + (r_max − r_min)·u, r_min 0.2, r_max 0.9."""
    uniform = BUDGET_SCHEDULES.get("uniform")
    for step in (0, 3, 99):  # the window does not move with progress
        for seed in range(20):
            u = float(torch.rand((), generator=torch.Generator().manual_seed(seed)))
            got = uniform(
                step, total_steps=100, generator=torch.Generator().manual_seed(seed), min_budget=0.1, max_budget=0.8
            )
            assert got == pytest.approx(1.0 - (0.2 + (0.9 - 0.2) * u), abs=1e-12)
            assert 0.1 <= got <= 0.8
    with pytest.raises(ValueError, match="min_budget=0.9 is above max_budget=0.8"):
        uniform(0, total_steps=1, generator=torch.Generator(), min_budget=0.9, max_budget=0.8)


@pytest.fixture(scope="module")
def deep_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns a tiny Qwen2.5-VL with a 4-layer LLM (room for K = 4 -> 3 -> 2) and a 6-row training TSV."""
    root = tmp_path_factory.mktemp("tiny-lcd")
    model_dir = root / "tiny-model"
    processor = char_processor(14, model_dir)
    tiny_qwen2_5_vl(processor.tokenizer, seed=0, layers=4).save_pretrained(model_dir)
    tsv = root / "train.tsv"
    write_tsv(tsv, training_items(6))
    return TinyEnv(model_dir, tsv)


def test_a_run_prunes_student_and_teacher_at_the_moving_layer(deep_env: TinyEnv, tmp_path: Path) -> None:
    """method=epic_lcd pruner=fastv (K = 2) on a 4-layer LLM over 6 steps: Eq. 9 gives 4, 4, 3, 3, 3, 2."""
    trainer = make_trainer(deep_env, tmp_path, "method=epic_lcd", "pruner=fastv", "steps=6")
    assert trainer.cfg.pruner.layer == 2
    used = []
    for step in range(6):
        assert step_layer(trainer) == paper_layer(step, 6, 4, 2)
        metrics, micro, budget = train_step(trainer)
        assert 0.1 <= budget <= 0.8
        layers = set()
        for mb in micro:
            for student_sel, teacher_sel in zip(mb.selections, mb.teacher_selections, strict=True):
                for s, t in zip(student_sel, teacher_sel, strict=True):  # one layer for both (Eq. 12)
                    layer = s.layer if isinstance(s, LayerSelection) else 4
                    assert layer == (t.layer if isinstance(t, LayerSelection) else 4)
                    layers.add(layer)
        (layer,) = layers
        used.append(layer)
        assert metrics["train/prune_layer"] == layer
        if layer == 4:  # Eq. 9's ℓ_0 = L: compressing after the last layer drops nothing (KL(teacher‖student) = 0)
            assert metrics["train/kept_visual_fraction"] == metrics["train/teacher_kept_visual_fraction"] == 1.0
            for mb in micro:  # both contexts are the full one: the student's and the teacher's are the same
                for sample, sel, teacher in zip(mb.encoded, mb.selections, mb.teacher_selections, strict=True):
                    for image, s, t in zip(sample.images, sel, teacher, strict=True):
                        assert torch.equal(s.indices, torch.arange(image.num_tokens))
                        assert torch.equal(t.indices, s.indices)
        else:  # the student keeps k of its budget, the teacher more (its milder ratio, Eq. 11), from layer K on
            for mb in micro:
                for sample, sel in zip(mb.encoded, mb.selections, strict=True):
                    for image, s in zip(sample.images, sel, strict=True):
                        assert s.indices.numel() == tokens_to_keep(budget, image.num_tokens)
            assert metrics["train/kept_visual_fraction"] < metrics["train/teacher_kept_visual_fraction"]
    assert used == [4, 4, 3, 3, 3, 2]


def test_a_fixed_layer_run_prunes_at_pruner_layer(deep_env: TinyEnv, tmp_path: Path) -> None:
    """Table 4's "w/o progressive compression layer": method.layer_schedule=null keeps K = pruner.layer."""
    trainer = make_trainer(
        deep_env, tmp_path, "method=epic_lcd", "pruner=dart", "steps=4", "method.layer_schedule=null"
    )
    assert step_layer(trainer) is None
    metrics, micro, _ = train_step(trainer)
    assert {s.layer for mb in micro for sel in mb.selections for s in sel} == {2}
    assert "train/prune_layer" not in metrics


def config(env: TinyEnv, root: Path, *overrides: str):  # noqa: ANN201
    """Returns the checked train config of the shrunk run with ``overrides``."""
    return load_train_config(compose_train([*train_overrides(env, root), *overrides]))


@pytest.mark.parametrize("pruner", ["visionzip", "random", "cdpruner"])
def test_lcd_with_a_pre_llm_pruner_is_refused_naming_it(pruner: str, deep_env: TinyEnv, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=rf"pruner '{pruner}' prunes before the LLM .*\(pruner=dart or pruner=fastv\)"):
        config(deep_env, tmp_path, "method=epic_lcd", f"pruner={pruner}")


def test_the_tcd_presets_with_pre_llm_pruners_are_unaffected(deep_env: TinyEnv, tmp_path: Path) -> None:
    for method in ("epic", "epic_rescaled", "scopd", "lt_opd"):
        assert config(deep_env, tmp_path, f"method={method}").method.layer_schedule is None
    assert config(deep_env, tmp_path, "method=epic", "pruner=visionzip").pruner.stage == "pre_llm"


@pytest.mark.parametrize(
    ("overrides", "error", "match"),
    [
        (["method=epic_lcd", "method.layer_schedule=epic_deep_to_shalow"], KeyError, "Did you mean"),
        (
            ["method=grpo", "pruner=fastv", "method.layer_schedule=epic_deep_to_shallow"],
            ValueError,
            "method.layer_schedule='epic_deep_to_shallow' with method.objective='rl'",
        ),
        (
            ["method=epic_lcd", "method.schedule.params.uniform.min_budget=0.9"],
            ValueError,
            "min_budget=0.9 is above max_budget=0.8",
        ),
    ],
)
def test_bad_lcd_settings_fail_before_any_work(overrides, error, match, deep_env, tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(error, match=match):
        config(deep_env, tmp_path, *overrides)
