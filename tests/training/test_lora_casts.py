"""Adapter layers skip peft's fp32 input copy: under autocast the numbers are exactly those with the copy."""

from __future__ import annotations

import pytest
import torch
from peft.tuners.tuners_utils import BaseTunerLayer

from sparsectx.context import build_context, keep_all
from sparsectx.generation import response_logits

from .test_loop_support import TinyEnv, shared_env
from .test_teachers import context, fresh_student, method_config, perturb_


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


def test_skipping_input_casts_changes_no_number_under_bf16_autocast(tiny_env, tmp_path) -> None:  # noqa: ANN001
    student, _ = fresh_student("qwen2_5_vl", method_config(tiny_env, tmp_path, "method=scopd"), tmp_path)
    student.model.to(torch.bfloat16)
    perturb_(student.trainable, seed=1)  # adapters stay fp32, as build_student keeps them
    for p in student.trainable.values():
        p.data = p.data.float()
    layers = [m for m in student.model.modules() if isinstance(m, BaseTunerLayer)]
    assert layers and not any(m.cast_input_dtype_enabled for m in layers)
    encoded, responses = context(student, 14)

    def logits() -> torch.Tensor:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            batch = build_context(student.adapter, encoded, [keep_all(s) for s in encoded], responses)
            return response_logits(student.adapter, batch)[0]

    skipped = logits()
    for module in layers:
        module.cast_input_dtype_enabled = True
    assert torch.equal(skipped, logits())
