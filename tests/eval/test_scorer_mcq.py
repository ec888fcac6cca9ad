"""Multiple-choice matching, MCQ accuracy and MMBench circular evaluation on hand-computed cases."""

import pytest

from sparsectx.eval.scorers import ScoredItem, match_choice, score_items

OPTS = {"A": "a red apple", "B": "a green pear", "C": "blue", "D": "none of these"}


@pytest.mark.parametrize(
    ("prediction", "letter"),
    [
        ("B", "B"),
        ("(C)", "C"),
        ("D. none of these", "D"),
        ("b", "B"),
        ("A green pear", "B"),  # option text, not the letter A
        ("The answer is (C).", "C"),
        ("I think C is right", "C"),
        ("It shows a red apple on a table", "A"),
        ("blue", "C"),
        ("A or B", None),  # ambiguous
        ("A is correct", "A"),
        ("A pear, so B", "B"),  # leading "A" is an article here
        ("purple", None),
        (None, None),
        ("E", None),  # not an option
    ],
)
def test_match_choice(prediction, letter):
    assert match_choice(prediction, OPTS) == letter


def _mcq(i, pred, gold, cat=""):
    return ScoredItem(id=str(i), prediction=pred, reference=gold, options=OPTS, category=cat)


def test_mcq_accuracy_counts_misses_and_unmatched():
    items = [
        _mcq(1, "B", "B", "x"),
        _mcq(2, "A", "C", "x"),
        _mcq(3, None, "A", "y"),
        _mcq(4, "purple", "D", "y"),
    ]
    m = score_items("mcq", items).metrics
    assert m["score"] == 25.0
    assert (m["n"], m["missing"], m["unmatched"]) == (4, 1, 1)
    assert (m["category/x"], m["category/y"]) == (50.0, 0.0)


def _rotations(qid, answers_right):
    """Four circular rotations of one 4-option question; the gold answer moves with the rotation."""
    texts = ["cat", "dog", "cow", "pig"]
    items = []
    for r, right in enumerate(answers_right):
        rotated = texts[r:] + texts[:r]
        opts = dict(zip("ABCD", rotated, strict=True))
        gold = "ABCD"[rotated.index("dog")]
        wrong = "ABCD"[rotated.index("cat")]
        items.append(
            ScoredItem(
                id=f"{qid}-{r}",
                prediction=gold if right else wrong,
                reference=gold,
                options=opts,
                group=qid,
                category="animals",
            )
        )
    return items


def test_mmbench_question_failing_one_rotation_counts_as_wrong():
    items = _rotations("q1", [True, True, True, True]) + _rotations("q2", [True, True, False, True])
    m = score_items("mmbench_circular", items).metrics
    assert m["score"] == 50.0  # q2 fails under rotation 2 only, and that is enough to lose it
    assert m["rotation_acc"] == 87.5  # 7 of 8 single rotations are right
    assert (m["n"], m["n_items"]) == (2, 8)
    assert m["category/animals"] == 50.0


def test_mmbench_needs_group_ids():
    item = ScoredItem(id="1", prediction="A", reference="A", options=OPTS)
    with pytest.raises(ValueError, match="group"):
        score_items("mmbench_circular", [item])
