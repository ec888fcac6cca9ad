"""LT-OPD Table 7 teachers: the trust-region logits against their definition, the progressive teacher's hard
copy every N updates (equal to the student right after a copy, fixed in between), and their config errors."""

from __future__ import annotations

import pytest
import torch

from sparsectx.context import build_context, keep_all
from sparsectx.generation import response_logits
from sparsectx.training.ema import PeriodicCopy
from sparsectx.training.teachers import teacher_logits, trust_region_logits

from .test_teachers import context, fresh_student, method_config, perturb_, tiny_env  # noqa: F401


def make_params(seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {"a": torch.randn(4, 3, generator=gen).bfloat16(), "b": torch.randn(3, generator=gen)}


@pytest.mark.parametrize("lam", [0.0, 0.05, 0.5, 1.0])
def test_trust_region_logits_are_the_logit_space_interpolation(lam: float) -> None:
    gen = torch.Generator().manual_seed(0)
    reference = torch.randn(2, 5, 9, generator=gen).bfloat16()
    current = torch.randn(2, 5, 9, generator=gen).bfloat16()
    got = trust_region_logits(reference, current, lam)
    want = (1.0 - lam) * reference.double() + lam * current.double()
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, atol=1e-6, rtol=1e-6)
    if lam == 0.0:
        assert torch.equal(got, reference.float())
    if lam == 1.0:
        assert torch.equal(got, current.float())


def test_periodic_copy_holds_the_initial_tensors_then_copies_every_n_updates() -> None:
    live = make_params(0)
    initial = {n: p.float() for n, p in live.items()}
    copy = PeriodicCopy(3, live)
    steps = [make_params(seed) for seed in range(1, 8)]
    teacher = initial
    for step, params in enumerate(steps, start=1):
        copy.update(params)
        if step % 3 == 0:
            teacher = {n: p.float() for n, p in params.items()}
        assert copy.num_updates == step
        for name, value in copy.shadow().items():  # right after a copy step: the student; else unchanged
            assert torch.equal(value, teacher[name]), (step, name)
    assert all(torch.equal(copy.shadow()[n], steps[5][n].float()) for n in live)  # last copy at step 6


def test_periodic_copy_swaps_in_the_copy_and_restores_bit_exactly() -> None:
    params = make_params(0)
    copy = PeriodicCopy(2, params)
    moved = make_params(1)
    for name, p in params.items():
        p.copy_(moved[name])
    before = {n: p.clone() for n, p in params.items()}
    with copy.swapped(params):
        assert all(torch.equal(p.float(), make_params(0)[n].float()) for n, p in params.items())
    assert all(torch.equal(p, before[n]) for n, p in params.items())


def test_periodic_copy_state_round_trips_and_rejects_another_interval() -> None:
    copy = PeriodicCopy(2, make_params(0))
    for seed in range(1, 4):
        copy.update(make_params(seed))
    resumed = PeriodicCopy(2, make_params(9))
    resumed.load_state_dict(copy.state_dict())
    assert resumed.num_updates == 3
    assert all(torch.equal(resumed.shadow()[n], copy.shadow()[n]) for n in copy.shadow())
    resumed.update(make_params(4))  # step 4: a copy step after resume as before
    assert torch.equal(resumed.shadow()["b"], make_params(4)["b"])
    with pytest.raises(ValueError, match="interval"):
        PeriodicCopy(3, make_params(0)).load_state_dict(copy.state_dict())
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="interval"):
            PeriodicCopy(bad, make_params(0))  # type: ignore[arg-type]


def _live_logits(student, encoded, responses) -> torch.Tensor:  # noqa: ANN001
    with torch.no_grad():
        logits, _ = response_logits(
            student.adapter,
            build_context(student.adapter, encoded, [keep_all(s) for s in encoded], responses),
        )
    return logits


def test_progressive_teacher_equals_the_student_after_a_copy_and_stays_fixed(tiny_env, tmp_path) -> None:  # noqa: ANN001, F811
    method = method_config(tiny_env, tmp_path, "method=lt_opd_teacher_progressive", "method.teacher.update_interval=2")
    student, _ = fresh_student("qwen2_5_vl", method, tmp_path)
    encoded, responses = context(student, 14)
    initial = _live_logits(student, encoded, responses)
    perturb_(student.trainable, seed=1)
    student.ema.update(student.trainable)  # step 1: no copy, the teacher is still the initial model
    assert torch.equal(teacher_logits(student, "progressive", encoded, responses), initial)
    perturb_(student.trainable, seed=2)
    student.ema.update(student.trainable)  # step 2: hard copy
    at_copy = _live_logits(student, encoded, responses)
    assert torch.equal(teacher_logits(student, "progressive", encoded, responses), at_copy)
    perturb_(student.trainable, seed=3)
    student.ema.update(student.trainable)  # step 3: fixed in between
    current = {n: p.detach().clone() for n, p in student.trainable.items()}
    assert torch.equal(teacher_logits(student, "progressive", encoded, responses), at_copy)
    assert all(torch.equal(p, current[n]) for n, p in student.trainable.items())  # student restored


def test_trust_region_teacher_mixes_the_frozen_model_and_the_current_student(tiny_env, tmp_path) -> None:  # noqa: ANN001, F811
    method = method_config(tiny_env, tmp_path, "method=lt_opd_teacher_trust_region")
    student, _ = fresh_student("qwen2_5_vl", method, tmp_path)
    assert student.frozen is not None  # full parameters: the reference is the frozen copy
    encoded, responses = context(student, 14)
    initial = _live_logits(student, encoded, responses)
    perturb_(student.trainable, seed=1)
    reference = teacher_logits(student, "trust_region", encoded, responses)
    assert torch.equal(reference, initial)  # the view is the frozen initial model
    current = teacher_logits(student, "shared", encoded, responses)
    lam = method.teacher.trust_region_lambda
    want = (1 - lam) * initial.double() + lam * _live_logits(student, encoded, responses).double()
    torch.testing.assert_close(trust_region_logits(reference, current, lam).double(), want, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (
            ["method=lt_opd_teacher_trust_region", "method.teacher.trust_region_lambda=1.5"],
            "trust_region_lambda",
        ),
        (
            ["method=lt_opd_teacher_trust_region", "method.teacher.trust_region_lambda=-0.1"],
            "trust_region_lambda",
        ),
        (
            ["method=lt_opd_teacher_trust_region", "method.teacher.trust_region_lambda=null"],
            "trust_region_lambda",
        ),
        (["method=lt_opd", "method.teacher.trust_region_lambda=0.1"], "trust_region_lambda"),
        (["method=lt_opd_teacher_progressive", "method.teacher.update_interval=0"], "update_interval"),
        (["method=lt_opd_teacher_progressive", "method.teacher.update_interval=null"], "update_interval"),
        (["method=lt_opd", "method.teacher.update_interval=5"], "update_interval"),
        (["method=sft", "method.positions.name=tip", "method.positions.fraction=0.1"], "positions.name"),
    ],
)
def test_bad_teacher_settings_name_the_key(overrides: list[str], key: str, tiny_env, tmp_path) -> None:  # noqa: ANN001, F811
    with pytest.raises((ValueError, KeyError), match=key):
        method_config(tiny_env, tmp_path, *overrides)
