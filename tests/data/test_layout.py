"""``PromptParts.remove``: literal strings dropped from the rendered question text, wherever they occur.

MUIRBench keeps ``<image>`` tags in its questions and options; VLMEvalKit's ``MUIRDataset.split_MUIR`` turns
each into an image position and drops it from the text. The project puts every image before the text, so
its parts drop the tags from the question and the options alike, and from nothing else.
"""

from __future__ import annotations

from sparsectx.data import Item
from sparsectx.data.layout import PromptParts, render_question


def _item(question: str, options: dict[str, str]) -> Item:
    return Item(
        index=0,
        image_bytes=b"",
        question=question,
        options=options,
        answer="A",
        category="",
        family="",
        subset="",
        trace="",
        scene="",
        extra={},
    )


def _parts(remove: list[str]) -> PromptParts:
    return PromptParts(
        ["{question}\n", "{options}"], "{letter}. {text}", "\n", "", "\nAnswer with the letter.", "test", remove
    )


def test_remove_drops_every_occurrence_in_question_and_options() -> None:
    item = _item("<image><image>Which image matches <image>?", {"A": "<image>", "B": "the <image> one"})
    text = render_question(item, _parts(["<image>"]), "")
    assert text == "Which image matches ?\nA. \nB. the  one\nAnswer with the letter."


def test_without_remove_the_text_is_kept_as_written() -> None:
    item = _item("Which image matches <image>?", {"A": "<image>", "B": "none"})
    assert (
        render_question(item, _parts([]), "")
        == "Which image matches <image>?\nA. <image>\nB. none\nAnswer with the letter."
    )
    assert PromptParts(["{question}"], "", "", "", "", "test").remove == []  # the default: nothing removed


def _video_item(extra: dict[str, str]) -> Item:
    return Item(0, b"", "What moves?", {"A": "left", "B": "right"}, "A", "", "", "", "", "", extra)


def test_a_lines_field_writes_a_list_cell_one_item_per_line() -> None:
    """``{candidates:lines}`` is VLMEvalKit's ``'\\n'.join(eval(line['candidates']))`` (Video-MME, TempCompass)."""
    parts = PromptParts(["Question: {question}\n", "{candidates:lines}", "\nAnswer: "], "", "", "", "", "test")
    cell = "['Caption A: a dog runs left.', \"Caption B: it's running right.\"]"
    assert render_question(_video_item({"candidates": cell}), parts, "") == (
        "Question: What moves?\nCaption A: a dog runs left.\nCaption B: it's running right.\nAnswer: "
    )


def test_a_lines_field_of_a_missing_or_unlisted_cell_leaves_its_part_out() -> None:
    parts = PromptParts(["Q: {question}", "\n{candidates:lines}"], "", "", "", "", "test")
    assert render_question(_video_item({}), parts, "") == "Q: What moves?"
    assert render_question(_video_item({"candidates": "A. left"}), parts, "") == "Q: What moves?"
    assert render_question(_video_item({"candidates": "[]"}), parts, "") == "Q: What moves?"
