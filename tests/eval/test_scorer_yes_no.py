"""Yes/no parsing, yes/no accuracy, MME (acc vs acc+) and POPE (F1 per subset) on hand-computed cases."""

import pytest

from sparsectx.eval.scorers import ScoredItem, parse_yes_no, score_items


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("Yes", "yes"),
        ("no.", "no"),
        ("Yes, there is a dog but no cat.", None),  # both words: VLMEvalKit's YOrN_Extraction gives up
        ("There is no dog.", "no"),
        ("I do not think so", None),
        ("maybe", None),
        ("yes and no", None),  # both words, whatever comes first
        ("It could be yes or no", None),
        (None, None),
    ],
)
def test_parse_yes_no(text, parsed):
    assert parse_yes_no(text) == parsed


def test_yes_no_accuracy():
    items = [
        ScoredItem(id="1", prediction="Yes", reference="yes"),
        ScoredItem(id="2", prediction="No", reference="Yes"),
        ScoredItem(id="3", prediction="unsure", reference="no"),
        ScoredItem(id="4", prediction=None, reference="no"),
    ]
    m = score_items("yes_no", items).metrics
    assert (m["score"], m["missing"], m["unparsed"]) == (25.0, 1, 1)


def test_yes_no_rejects_non_binary_gold():
    with pytest.raises(ValueError, match="expected 'yes' or 'no'"):
        score_items("yes_no", [ScoredItem(id="1", prediction="yes", reference="maybe")])


def _mme(qid, image, category, pred, gold):
    return ScoredItem(id=qid, prediction=pred, reference=gold, category=category, group=image)


def test_mme_pair_with_one_wrong_answer_keeps_acc_but_loses_acc_plus():
    items = [
        _mme("1", "e1", "existence", "Yes", "yes"),
        _mme("2", "e1", "existence", "No", "no"),
        _mme("3", "e2", "existence", "Yes", "yes"),
        _mme("4", "e2", "existence", "Yes", "no"),  # the one wrong answer
        _mme("5", "c1", "code_reasoning", "Yes", "yes"),
        _mme("6", "c1", "code_reasoning", "No", "no"),
    ]
    m = score_items("mme", items).metrics
    assert m["existence/acc"] == 75.0  # 3 of 4 questions
    assert m["existence/acc_plus"] == 50.0  # 1 of 2 images has both right
    assert m["existence"] == 125.0
    assert m["code_reasoning"] == 200.0
    assert (m["perception"], m["cognition"], m["score"]) == (125.0, 200.0, 325.0)


def test_mme_rejects_broken_pairs_and_unknown_categories():
    with pytest.raises(ValueError, match="exactly 2"):
        score_items("mme", [_mme("1", "e1", "existence", "yes", "yes")])
    with pytest.raises(ValueError, match="category 'Existence'"):
        score_items("mme", [_mme("1", "e1", "Existence", "yes", "yes"), _mme("2", "e1", "Existence", "no", "no")])


def _pope(qid, subset, pred, gold):
    return ScoredItem(id=qid, prediction=pred, reference=gold, subset=subset)


def test_pope_f1_per_subset_pooled_and_macro():
    preds = {
        # random: TP=1, FP=1, FN=1, TN=1 -> P=R=F1=0.5, acc 0.5
        "random": [("yes", "yes"), ("no", "yes"), ("no", "no"), ("yes", "no")],
        # adversarial: TP=2, FN=1, TN=1 -> P=1, R=2/3, F1=0.8, acc 0.75
        "adversarial": [("yes", "yes"), ("yes", "yes"), ("no", "yes"), ("no", "no")],
    }
    items = [_pope(f"{s}{i}", s, p, g) for s, pairs in preds.items() for i, (p, g) in enumerate(pairs)]
    m = score_items("pope", items, "f1").metrics
    assert m["random/f1"] == pytest.approx(50.0)
    assert m["random/acc"] == pytest.approx(50.0)
    assert m["adversarial/precision"] == pytest.approx(100.0)
    assert m["adversarial/recall"] == pytest.approx(200.0 / 3)
    assert m["adversarial/f1"] == pytest.approx(80.0)
    assert m["adversarial/acc"] == pytest.approx(75.0)
    assert m["macro_f1"] == pytest.approx(65.0)
    assert m["macro_accuracy"] == pytest.approx(62.5)  # (50 + 75) / 2
    # pooled over all 8 rows (VLMEvalKit's Overall): TP=3, FP=1, FN=2 -> P=3/4, R=3/5, F1=2/3, acc 5/8
    assert m["f1"] == pytest.approx(200.0 / 3) and m["score"] == m["f1"]
    assert m["acc"] == pytest.approx(62.5)


def test_pope_unreadable_answer_is_neither_tp_nor_fp():
    items = [_pope("1", "popular", "unsure", "yes"), _pope("2", "popular", "yes", "yes")]
    m = score_items("pope", items, "macro_accuracy").metrics
    assert m["popular/precision"] == 100.0 and m["popular/recall"] == 50.0
