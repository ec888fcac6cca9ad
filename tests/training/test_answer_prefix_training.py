"""``model.answer_prefix`` in training: the student's and the teacher's prompts end with it, rollouts continue
from it and read as it plus their text, and a reference prefix (SFT, fixed-prefix KD) is the reference's
continuation after it, never repeating it.

The tiny training model's template opens nothing after the assistant header, so ``<answer>`` is all that is
pre-filled; its references are ``<think>look</think><answer>red</answer>``-style traces.
"""

from __future__ import annotations

import pytest
import torch

from sparsectx.training.contexts import prepare_step
from sparsectx.training.rollout import is_correct

from .test_loop_support import TinyEnv, make_trainer, shared_env, training_items

PREFIX = "<answer>"
SET = f"model.answer_prefix='{PREFIX}'"


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


def _step(env: TinyEnv, root, *overrides: str):  # noqa: ANN001, ANN202
    trainer = make_trainer(env, root, *overrides)
    items = training_items(2)
    (mb,) = prepare_step(trainer.cfg, trainer.student, [(items, [0, 1])], 0.3, torch.Generator().manual_seed(0))
    return trainer.student.processor, items, mb


def _ends_with(ids: torch.Tensor, processor, text: str) -> bool:  # noqa: ANN001
    tail = processor.tokenizer(text, add_special_tokens=False).input_ids
    return ids[-len(tail) :].tolist() == tail


def test_the_student_and_the_teacher_prompts_end_with_the_prefix(tiny_env: TinyEnv, tmp_path) -> None:  # noqa: ANN001
    processor, _, mb = _step(tiny_env, tmp_path, "method=scopd_gt", SET)
    assert processor.answer_prefix == PREFIX
    for student, teacher in zip(mb.encoded, mb.teacher_encoded, strict=True):
        assert _ends_with(student.prompt_ids, processor, f"assistant\n{PREFIX}")
        assert _ends_with(teacher.prompt_ids, processor, f"assistant\n{PREFIX}")  # its reference is in the user turn
        assert teacher.prompt_ids.numel() > student.prompt_ids.numel()


def test_a_reference_prefix_is_the_continuation_after_the_answer_prefix(tiny_env: TinyEnv, tmp_path) -> None:  # noqa: ANN001
    processor, items, mb = _step(tiny_env, tmp_path, "method=sft", "max_new_tokens=64", SET)
    for item, tokens, text in zip(items, mb.prefix.tokens, mb.prefix.texts, strict=True):
        assert processor.tokenizer.decode(tokens, skip_special_tokens=True) == f"{item.answer}</answer>"
        assert text == f"<answer>{item.answer}</answer>" and is_correct(text, item)


def test_rollouts_continue_from_the_prefix_and_read_with_it(tiny_env: TinyEnv, tmp_path) -> None:  # noqa: ANN001
    processor, _, mb = _step(tiny_env, tmp_path, "method=scopd", SET)
    for tokens, text in zip(mb.prefix.tokens, mb.prefix.texts, strict=True):
        assert text == PREFIX + processor.tokenizer.decode(tokens, skip_special_tokens=True)


def test_without_the_setting_references_keep_their_tags(tiny_env: TinyEnv, tmp_path) -> None:  # noqa: ANN001
    processor, items, mb = _step(tiny_env, tmp_path, "method=sft", "max_new_tokens=64")
    assert processor.answer_prefix == ""
    for item, tokens, text in zip(items, mb.prefix.tokens, mb.prefix.texts, strict=True):
        assert text == item.trace == processor.tokenizer.decode(tokens, skip_special_tokens=True)
        assert _ends_with(mb.encoded[0].prompt_ids, processor, "assistant\n")
