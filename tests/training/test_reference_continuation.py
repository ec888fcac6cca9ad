"""A reference trace appended to a generation prompt never repeats what the chat template already opened.

Qwen3.5's template opens ``<think>\\n`` after the assistant header in thinking mode and writes an empty block
``<think>\\n\\n</think>\\n\\n`` with thinking off; the references are ``<think>…</think><answer>…</answer>``
traces or bare ``<answer>…</answer>``. The prompt plus the continuation must read as one well-formed turn.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from family_models import published_checkpoint

from sparsectx.models.processor import load_processor
from sparsectx.training.batches import reference_continuation

TRACE = "<think>\nThe ball is red.\n</think>\n<answer>red</answer>"
BARE = "<answer>red</answer>"


@pytest.fixture(scope="module")
def qwen35(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return published_checkpoint("Qwen3.5-4B", tmp_path_factory.mktemp("qwen35"))


def test_a_template_that_opens_nothing_keeps_the_reference_as_written() -> None:
    assert reference_continuation(TRACE, "") == TRACE
    assert reference_continuation(BARE, "") == BARE


def test_an_open_thinking_block_is_continued_not_repeated(qwen35: Path) -> None:
    opened = load_processor(qwen35, thinking=True).generation_prefix
    assert opened == "<think>\n"  # the published template's thinking mode
    whole = opened + reference_continuation(TRACE, opened)
    assert whole == TRACE and whole.count("<think>") == 1


def test_an_answer_only_reference_closes_the_open_block_as_the_template_writes_an_empty_one(qwen35: Path) -> None:
    opened = load_processor(qwen35, thinking=True).generation_prefix
    empty = load_processor(qwen35, thinking=False).generation_prefix  # the template's own empty block
    assert opened + reference_continuation(BARE, opened) == empty + BARE


def test_thinking_off_drops_the_references_thinking_and_keeps_its_answer(qwen35: Path) -> None:
    opened = load_processor(qwen35, thinking=False).generation_prefix
    assert opened.startswith("<think>") and "</think>" in opened
    assert reference_continuation(TRACE, opened) == BARE
    assert reference_continuation(BARE, opened) == BARE


# model.answer_prefix: LT-OPD's empty-thinking, open-answer prefix (App. D.1). The prompt holds the template's
# block and "<answer>" (``prefilled``); the reference continues after both.


def test_an_answer_prefix_after_the_empty_block_is_cut_from_the_references_answer(qwen35: Path) -> None:
    processor = load_processor(qwen35, thinking=False, answer_prefix="<answer>")
    opened = processor.prefilled
    assert opened == "<think>\n\n</think>\n\n<answer>"
    for reference in (TRACE, BARE):
        continuation = reference_continuation(reference, opened)
        assert continuation == "red</answer>"
        assert opened + continuation == load_processor(qwen35, thinking=False).generation_prefix + BARE
        assert processor.response(continuation) == BARE  # what correctness and rewards read


def test_an_answer_prefix_on_a_template_that_opens_nothing_drops_the_thinking() -> None:
    assert reference_continuation(TRACE, "<answer>") == "red</answer>"
    assert reference_continuation(BARE, "<answer>") == "red</answer>"
    assert reference_continuation(BARE, "<answer>\n") == "red</answer>"  # its trailing space is the prompt's


def test_a_reference_that_does_not_begin_with_the_prefix_is_refused() -> None:
    with pytest.raises(ValueError, match="does not begin its answer with '<answer>'"):
        reference_continuation("red", "<think>\n\n</think>\n\n<answer>")


def test_an_answer_prefix_inside_an_open_thinking_block_is_refused(qwen35: Path) -> None:
    with pytest.raises(ValueError, match="inside the thinking block .* set model.thinking=false"):
        load_processor(qwen35, thinking=True, answer_prefix="<answer>")  # Qwen3.5's default opens <think>
    with pytest.raises(ValueError, match="inside an open thinking block"):
        reference_continuation(TRACE, "<think>\nLet me look.")  # a prefix that opens one itself
