"""VQA soft accuracy and normalisation, OCRBench containment, exact and number match."""

import pytest

from sparsectx.eval.scorers import (
    ScoredItem,
    normalize_vqa_answer,
    parse_number,
    score_items,
    vqa_soft_accuracy,
)

OTHER = ["dog"] * 10


def _answers(matching):
    return ["cat"] * matching + OTHER[matching:]


@pytest.mark.parametrize(
    ("matching", "expected"),
    [
        # Leave-one-out: dropping a matching annotator leaves matching-1, dropping another leaves matching.
        (4, 1.0),  # 4 x min(3/3, 1) + 6 x min(4/3, 1) = 10 -> 1.0
        (3, 0.9),  # 3 x 2/3 + 7 x 3/3 = 9 -> 0.9 (plain min(3/3, 1) would say 1.0)
        (2, 0.6),  # 2 x 1/3 + 8 x 2/3 = 6 -> 0.6
        (1, 0.3),  # 1 x 0 + 9 x 1/3 = 3 -> 0.3
        (0, 0.0),
    ],
)
def test_vqa_soft_accuracy_leave_one_out_by_hand(matching, expected):
    assert vqa_soft_accuracy("cat", _answers(matching)) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("Two dogs.", "2 dogs"),
        ("The Cat", "cat"),
        ("an apple", "apple"),
        ("dont know", "don't know"),
        ("yes, it is!", "yes it is"),
        ("1,000", "1000"),
        ("e-mail", "e mail"),
        ("3.5 m.", "3.5 m"),
        ("couldnt've", "couldn't've"),  # a key of the scripts' table ("couldntve" is not)
        ("well", "well"),  # ordinary word, not a contraction
        ("line\nbreak", "line break"),
    ],
)
def test_vqa_normalisation(raw, normal):
    assert normalize_vqa_answer(raw) == normal


def test_vqa_normalisation_applies_to_prediction_and_humans():
    assert vqa_soft_accuracy("Two.", ["two"] * 3 + ["2"] + ["three"] * 6) == 1.0


def test_vqa_scorer_reports_percent_and_misses():
    items = [
        ScoredItem(id="1", prediction="cat", reference="", answers=tuple(_answers(3))),
        ScoredItem(id="2", prediction=None, reference="", answers=tuple(_answers(3))),
    ]
    m = score_items("vqa_soft", items).metrics
    assert m["score"] == pytest.approx(45.0)
    assert (m["exact"], m["missing"]) == (50.0, 1)


def test_vqa_needs_several_answers():
    with pytest.raises(ValueError, match="at least 2"):
        vqa_soft_accuracy("cat", ["cat"])


def test_ocrbench_containment_out_of_1000():
    hme = "Handwritten Mathematical Expression Recognition"
    items = [
        ScoredItem(
            id="1",
            prediction="The sign says STOP here",
            reference="stop",
            category="Regular Text Recognition",
        ),
        ScoredItem(id="2", prediction="x ^ { 2 } + 1", reference="x^{2}+1", category=hme),
        ScoredItem(id="3", prediction="X^{2}+1", reference="x^{2}+1", category=hme),  # case kept for HME
        ScoredItem(id="4", prediction="Paris", reference="", answers=("London", "paris"), category="Doc-oriented VQA"),
        ScoredItem(id="5", prediction=None, reference="stop", category="Regular Text Recognition"),
    ]
    m = score_items("ocrbench", items).metrics
    assert m["hits"] == 3
    assert m["score"] == 600.0  # 3 of 5 scaled to 1000; on the full set this is the raw hit count
    assert m[f"category/{hme}"] == 1
    assert m["missing"] == 1


def test_exact_match():
    items = [
        ScoredItem(id="1", prediction=" Red. ", reference="red"),
        ScoredItem(id="2", prediction="crimson", reference="red", answers=("crimson",)),
        ScoredItem(id="3", prediction="dark red", reference="red"),
    ]
    assert score_items("exact_match", items).metrics["score"] == pytest.approx(200 / 3)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3", 3.0),
        ("There are 3 cats.", 3.0),
        ("three", 3.0),
        ("1,024", 1024.0),
        ("2.50", 2.5),
        ("3 or 4", None),
        ("", None),
    ],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


def test_number_match():
    items = [
        ScoredItem(id="1", prediction="7", reference="7"),
        ScoredItem(id="2", prediction="seven", reference="7"),
        ScoredItem(id="3", prediction="7.0 objects", reference="7"),
        ScoredItem(id="4", prediction="6 or 7", reference="7"),
        ScoredItem(id="5", prediction="8", reference="7"),
    ]
    m = score_items("number_match", items).metrics
    assert (m["score"], m["unparsed"]) == (60.0, 1)
