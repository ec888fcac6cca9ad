"""The rollout twin (``rollout_weights=copy``): the student's current weights in plain tensors, shared elsewhere.

Reference: the live student's own forward (peft adapter layers, fp32 master weights) on the same context.
"""

from __future__ import annotations

import pytest
import torch

from sparsectx.context import build_context
from sparsectx.generation import response_logits
from sparsectx.training.decode_copy import build_copy, rollout_adapter, uses_copy
from sparsectx.training.teachers import teacher_logits
from sparsectx.visual import Selection

from .test_loop_support import TinyEnv, shared_env
from .test_teachers import BUILDERS, context, fresh_student, method_config, perturb_


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


def logits_of(adapter, encoded, responses) -> torch.Tensor:  # noqa: ANN001
    """Returns ``adapter``'s response logits on pruned contexts keeping every other visual token."""
    selections = [
        [Selection.gather(image, torch.arange(0, image.num_tokens, 2)) for image in sample.images] for sample in encoded
    ]
    with torch.no_grad():
        return response_logits(adapter, build_context(adapter, encoded, selections, responses))[0]


@pytest.mark.parametrize("family", sorted(BUILDERS))
def test_lora_twin_equals_the_live_student_and_follows_updates(family: str, tiny_env, tmp_path) -> None:  # noqa: ANN001
    student, _ = fresh_student(family, method_config(tiny_env, tmp_path, "method=scopd"), tmp_path)
    perturb_(student.trainable, seed=1)
    encoded, responses = context(student, BUILDERS[family][1])
    twin = build_copy(student, 8)
    twin.refresh()
    live = logits_of(student.adapter, encoded, responses)
    torch.testing.assert_close(logits_of(twin.adapter, encoded, responses), live, atol=1e-5, rtol=0)
    perturb_(student.trainable, seed=2)  # an optimizer step
    moved = logits_of(student.adapter, encoded, responses)
    assert not torch.allclose(moved, live, atol=1e-3)
    twin.refresh()
    torch.testing.assert_close(logits_of(twin.adapter, encoded, responses), moved, atol=1e-5, rtol=0)
    assert len(twin.merged) == len(student.trainable) // 2  # one merged weight per adapted linear (A and B)


def test_lora_twin_shares_every_frozen_tensor_and_owns_only_the_merged_weights(tiny_env, tmp_path) -> None:  # noqa: ANN001
    student, _ = fresh_student("qwen2_5_vl", method_config(tiny_env, tmp_path, "method=scopd"), tmp_path)
    twin = build_copy(student, 8)
    own = {t.data_ptr() for t, _ in twin.merged}
    source = {p.data_ptr() for p in student.model.parameters()}
    for name, param in twin.adapter.model.named_parameters():
        if param.data_ptr() in own:
            continue
        assert param.data_ptr() in source, f"{name} was copied instead of shared"
    assert not own & source
    assert not any(p.requires_grad for p in twin.adapter.model.parameters())
    before = {n: p.detach().clone() for n, p in student.model.named_parameters()}
    twin.refresh()
    for name, param in student.model.named_parameters():  # refreshing never writes the student
        assert torch.equal(param, before[name]), name


def test_full_parameter_twin_is_a_cast_of_the_master_weights(tiny_env, tmp_path) -> None:  # noqa: ANN001
    student, _ = fresh_student("qwen2_5_vl", method_config(tiny_env, tmp_path, "method=lt_opd"), tmp_path)
    perturb_(student.trainable, seed=3)
    twin = build_copy(student, 8)
    twin.refresh()
    assert len(twin.cast) == len({id(p) for p in student.trainable.values()})
    for target, module, name in twin.cast:
        master = getattr(module, name)
        assert any(master is p for p in student.trainable.values()), name  # the live master, not a copy
        assert target.dtype == student.dtype and torch.equal(target, master.to(student.dtype))
    encoded, responses = context(student, 14)
    live = logits_of(student.adapter, encoded, responses)
    torch.testing.assert_close(logits_of(twin.adapter, encoded, responses), live, atol=1e-6, rtol=0)


def test_choice_auto_decodes_live_on_cpu_and_a_bad_value_names_the_key(tiny_env, tmp_path) -> None:  # noqa: ANN001
    student, _ = fresh_student("qwen2_5_vl", method_config(tiny_env, tmp_path, "method=scopd"), tmp_path)
    assert not uses_copy("auto", student)
    assert rollout_adapter(student, "live", 8) is student.adapter
    assert rollout_adapter(student, "copy", 8) is rollout_adapter(student, "copy", 8)  # built once, kept
    with pytest.raises(ValueError, match="rollout_weights"):
        uses_copy("merged", student)


@pytest.mark.parametrize("family", sorted(BUILDERS))
def test_ema_teacher_on_the_twin_equals_the_live_ema_teacher(family: str, tiny_env, tmp_path) -> None:  # noqa: ANN001
    method = method_config(tiny_env, tmp_path, "method=scopd", "method.teacher.ema_decay=0.5")
    student, _ = fresh_student(family, method, tmp_path)
    encoded, responses = context(student, BUILDERS[family][1])
    perturb_(student.trainable, seed=1)
    student.ema.update(student.trainable)
    perturb_(student.trainable, seed=2)  # the EMA now differs from the student
    current = {n: p.detach().clone() for n, p in student.trainable.items()}
    twin = lambda: rollout_adapter(student, "copy", 8)  # noqa: E731
    live = teacher_logits(student, "ema", encoded, responses)
    merged = teacher_logits(student, "ema", encoded, responses, twin)
    torch.testing.assert_close(merged, live, atol=1e-5, rtol=0)
    student_logits = teacher_logits(student, "shared", encoded, responses)
    assert not torch.allclose(merged, student_logits, atol=1e-3)  # the twin held the EMA, not the student
    torch.testing.assert_close(
        teacher_logits(student, "shared", encoded, responses, twin), student_logits, atol=1e-5, rtol=0
    )
    assert all(torch.equal(p, current[n]) for n, p in student.trainable.items())  # the swap was undone
    frozen = teacher_logits(student, "frozen", encoded, responses)
    assert torch.equal(teacher_logits(student, "frozen", encoded, responses, twin), frozen)  # frozen stays live
