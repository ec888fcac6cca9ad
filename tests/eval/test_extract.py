"""Strict and lenient answer extraction, on hand-written outputs."""

import pytest

from sparsectx.eval.extract import EXTRACTOR_VERSION, Extraction, count_extractions, extract_answer


def test_tagged_answer_is_strict_and_lenient():
    got = extract_answer("<think>It is red.</think> <answer> B </answer>")
    assert got == Extraction(strict="B", lenient="B", status="tagged", version=EXTRACTOR_VERSION)


def test_last_complete_tag_wins_and_case_is_ignored():
    got = extract_answer("<answer>A</answer> wait, no. <ANSWER>C</ANSWER>")
    assert (got.strict, got.status) == ("C", "tagged")


@pytest.mark.parametrize(
    ("text", "lenient"),
    [
        ("I think the answer is 42.", "42"),
        ("Reasoning...\nAnswer: yes\nDone", "yes"),
        ("so x = \\boxed{17} and y = \\boxed{3.5}", "3.5"),
        ("<think>long</think>The dog", "The dog"),
        ("<answer>twelve apples", "twelve apples"),  # cut off before the closing tag
        ("thinking the answer is B</think> B", "B"),  # stray </think>: only what follows counts
        ("  plain reply  ", "plain reply"),
    ],
)
def test_untagged_text_falls_back_for_lenient_only(text, lenient):
    got = extract_answer(text)
    assert got.strict is None
    assert got.lenient == lenient
    assert got.status == "fallback"


@pytest.mark.parametrize("text", ["", "   ", "<think>only thoughts</think>", "<answer></answer>"])
def test_nothing_usable_is_a_miss_not_a_string(text):
    got = extract_answer(text)
    assert got.strict is None and got.lenient is None and got.status == "empty"


def test_empty_tag_falls_back_to_nothing_rather_than_tag_text():
    assert extract_answer("<answer> </answer>").status == "empty"


def test_counts_separate_strict_and_lenient():
    outs = ["<answer>A</answer>", "answer is B", "", "<answer>C</answer>"]
    counts = count_extractions(extract_answer(t) for t in outs)
    assert counts == {"n": 4, "tagged": 2, "fallback": 1, "empty": 1}


def test_rejects_non_text():
    with pytest.raises(TypeError, match="str"):
        extract_answer(None)  # type: ignore[arg-type]
