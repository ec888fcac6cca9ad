"""Budget schedules: closed-form values of both LT-OPD curriculum readings, hold phase, validation, EPIC."""

from __future__ import annotations

import math

import pytest
import torch

from sparsectx.training import BUDGET_SCHEDULES
from sparsectx.training.schedules import epic_teacher_budget

START, FINAL, TOTAL = 0.5, 0.05, 200


def curriculum(step: int, **overrides: object) -> float:
    params: dict[str, object] = dict(
        total_steps=TOTAL,
        generator=None,
        start_budget=START,
        final_budget=FINAL,
        alpha=2.0,
        decay_fraction=0.5,
        shape="power",
    )
    params.update(overrides)
    return BUDGET_SCHEDULES.get("cosine_curriculum")(step, **params)


@pytest.mark.parametrize("step", [0, 1, 13, 50, 99, 100, 101, 150, 199, 250])
def test_reading_a_power_matches_closed_form(step: int) -> None:
    decay_steps = 0.5 * TOTAL
    u = min(1.0, step / decay_steps)
    want = FINAL + (START - FINAL) * ((1 + math.cos(math.pi * u)) / 2) ** 2
    assert curriculum(step) == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("step", [0, 1, 13, 50, 99, 100, 101, 150, 199])
def test_reading_b_horizon_matches_closed_form(step: int) -> None:
    decay_steps = TOTAL / 2.0  # α = 2 → decay over the first half
    u = min(1.0, step / decay_steps)
    want = FINAL + (START - FINAL) * (1 + math.cos(math.pi * u)) / 2
    assert curriculum(step, shape="horizon", decay_fraction=None) == pytest.approx(want, abs=1e-12)


def test_readings_differ_and_both_start_and_hold() -> None:
    a = [curriculum(s) for s in range(TOTAL)]
    b = [curriculum(s, shape="horizon", decay_fraction=None) for s in range(TOTAL)]
    for values in (a, b):
        assert values[0] == pytest.approx(START)
        assert all(x >= y - 1e-15 for x, y in zip(values, values[1:], strict=False))  # never increases
        assert set(values[100:]) == {FINAL}  # both readings decay over 100 steps here, then hold exactly
    assert a[25] < b[25]  # the α-exponent drops faster early
    assert curriculum(30, decay_fraction=1.0) > curriculum(30, decay_fraction=0.5)


def test_hold_phase_is_exactly_constant() -> None:
    held = {curriculum(s) for s in range(100, TOTAL + 20)}
    assert held == {FINAL}


def test_constant_schedule() -> None:
    constant = BUDGET_SCHEDULES.get("constant")
    assert {constant(s, total_steps=10, generator=None, budget=0.1) for s in range(12)} == {0.1}
    with pytest.raises(ValueError, match="budget"):
        constant(0, total_steps=10, generator=None, budget=1.5)


def test_final_budget_above_start_raises_naming_both_fields() -> None:
    with pytest.raises(ValueError, match=r"final_budget=0\.6.*start_budget=0\.5"):
        curriculum(0, final_budget=0.6)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"shape": "cosine"}, "shape"),
        ({"shape": "horizon"}, "decay_fraction"),  # reading B gets its horizon from alpha
        ({"decay_fraction": None}, "decay_fraction"),
        ({"decay_fraction": 1.5}, "decay_fraction"),
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": 0.5, "shape": "horizon", "decay_fraction": None}, "alpha"),
        ({"start_budget": 0.0}, "start_budget"),
        ({"total_steps": 0}, "total_steps"),
    ],
)
def test_invalid_curriculum_fields_raise(overrides: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        curriculum(0, **overrides)


def epic_released(step: int, total: int, u: float) -> tuple[float, float]:
    """Returns (student, teacher) budgets of EPIC's released TCD rule for a uniform draw ``u`` in [0, 1).

    Written from ``ZichenWen1/EPIC:llava/train/llava_trainer_KD_from_pretrain_random.py::compute_loss`` in
    reduction ratios: max = 0.1 + (0.9 - 0.1)·p·0.8, min = 0.1 + (0.9 - 0.1)·p·0.2, red = uniform(min, max),
    gap = min(0.1 + 0.5p, 0.3), teacher red = max(red - gap, 0); budget = 1 - reduction.
    """
    p = min(step / total, 1.0)
    red_max = 0.1 + (0.9 - 0.1) * p * 0.8
    red_min = 0.1 + (0.9 - 0.1) * p * 0.2
    red = red_min + (red_max - red_min) * u
    teacher_red = max(red - min(0.1 + p * 0.5, 0.3), 0.0)
    return 1.0 - red, 1.0 - teacher_red


RELEASED = dict(start_budget=0.9, final_budget=0.26, easy_share=0.25)
GAP = dict(gap_start=0.1, gap_slope=0.5, gap_max=0.3)


@pytest.mark.parametrize("step", [0, 1, 25, 40, 63, 99, 100, 130])
def test_epic_progressive_matches_the_released_rule(step: int) -> None:
    epic = BUDGET_SCHEDULES.get("epic_progressive")
    u = float(torch.rand((), generator=torch.Generator().manual_seed(11)))  # the schedule's own draw
    got = epic(step, total_steps=100, generator=torch.Generator().manual_seed(11), **RELEASED)
    want_student, want_teacher = epic_released(step, 100, u)
    assert got == pytest.approx(want_student, abs=1e-12)
    assert epic_teacher_budget(got, step=step, total_steps=100, **GAP) == pytest.approx(want_teacher, abs=1e-12)


@pytest.mark.parametrize("u", [0.0, 0.5, 0.999])
def test_epic_window_edges_at_chosen_steps(u: float) -> None:
    # p = 0: both edges at reduction 0.1; p = 0.5: [0.18, 0.42]; p = 1: [0.26, 0.74] (released).
    for step, lo_red, hi_red in [(0, 0.1, 0.1), (50, 0.18, 0.42), (100, 0.26, 0.74)]:
        student, _ = epic_released(step, 100, u)
        assert student == pytest.approx(1.0 - (lo_red + (hi_red - lo_red) * u), abs=1e-12)


def test_epic_progressive_is_seeded_and_rescaled_to_the_deployment_budget() -> None:
    epic = BUDGET_SCHEDULES.get("epic_progressive")
    params = dict(total_steps=100, start_budget=0.9, final_budget=0.05, easy_share=0.25)

    def run(seed: int) -> list[float]:
        gen = torch.Generator().manual_seed(seed)
        return [epic(s, generator=gen, **params) for s in range(101)]

    first = run(0)
    assert first == run(0) and first != run(1)
    assert first[0] == pytest.approx(0.9)
    for s, budget in enumerate(first):  # hard edge 0.9 - 0.85p, easy edge 0.9 - 0.2125p
        p = s / 100
        assert 0.9 - 0.85 * p - 1e-12 <= budget <= 0.9 - 0.2125 * p + 1e-12
    draws = [epic(100, generator=torch.Generator().manual_seed(k), **params) for k in range(200)]
    assert min(draws) < 0.06 and max(draws) < 0.6875 + 1e-12  # the window ends at [0.05, 0.6875]
    with pytest.raises(ValueError, match="final_budget=0.95 is above start_budget=0.9"):
        epic(0, generator=torch.Generator(), **{**params, "final_budget": 0.95})
    with pytest.raises(ValueError, match="easy_share"):
        epic(0, generator=torch.Generator(), **{**params, "easy_share": 1.5})


def test_epic_teacher_budget_adds_a_capped_gap() -> None:
    kwargs = dict(total_steps=100, **GAP)
    assert epic_teacher_budget(0.5, step=0, **kwargs) == pytest.approx(0.6)
    assert epic_teacher_budget(0.5, step=20, **kwargs) == pytest.approx(0.7)
    assert epic_teacher_budget(0.5, step=90, **kwargs) == pytest.approx(0.8)
    assert epic_teacher_budget(0.9, step=90, **kwargs) == 1.0  # EPIC clamps the teacher reduction at 0
    with pytest.raises(ValueError, match="gap.start=0.0 must be > 0"):
        epic_teacher_budget(0.5, step=0, total_steps=100, gap_start=0.0, gap_slope=0.5, gap_max=0.3)
    with pytest.raises(ValueError, match="gap.max=1.0"):
        epic_teacher_budget(0.5, step=0, total_steps=100, gap_start=0.1, gap_slope=0.5, gap_max=1.0)


def test_registry_keys() -> None:
    assert BUDGET_SCHEDULES.names() == ["constant", "cosine_curriculum", "epic_progressive", "uniform"]
