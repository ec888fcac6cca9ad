"""The yes/no scorers against VLMEvalKit's exact-matching rules, transcribed here independently.

The ``ref_*`` functions are small literal transcriptions of VLMEvalKit's code (plain Python for its
pandas), each naming the file and function it follows; the scorers must agree with them item by item
and in every aggregate, on predictions chosen to hit the rules' edge cases (markup, both words,
punctuation glued to or spaced from words, digit-comma-digit, more than 32 periods).
"""

import re
from collections import defaultdict

import pytest

from sparsectx.data.tsv import Item
from sparsectx.eval.config import compose_bench
from sparsectx.eval.protocol import is_correct, scored_item
from sparsectx.eval.scorers import ScoredItem, parse_yes_no, score_items

# --- references: VLMEvalKit (open-compass/VLMEvalKit) -------------------------------------------------


def ref_process_punctuation(in_text):
    """vlmeval/smp/misc.py ``process_punctuation``."""
    out_text = in_text
    punct = [
        ";",
        r"/",
        "[",
        "]",
        '"',
        "{",
        "}",
        "(",
        ")",
        "=",
        "+",
        "\\",
        "_",
        "-",
        ">",
        "<",
        "@",
        "`",
        ",",
        "?",
        "!",
    ]
    comma_strip = re.compile(r"(\d)(,)(\d)")
    period_strip = re.compile(r"(?!<=\d)(\.)(?!\d)")
    for p in punct:
        if (p + " " in in_text or " " + p in in_text) or (re.search(comma_strip, in_text) is not None):
            out_text = out_text.replace(p, "")
        else:
            out_text = out_text.replace(p, " ")
    # VLMEvalKit passes re.UNICODE as the third positional argument of sub, i.e. as ``count``.
    return period_strip.sub("", out_text, count=re.UNICODE)


def ref_yorn_extraction(output):
    """vlmeval/dataset/utils/yorn.py ``YOrN_Extraction``."""
    s = output.lower()
    words = ref_process_punctuation(s).split()
    if "yes" in words and "no" not in words:
        return "Yes"
    if "yes" not in words and "no" in words:
        return "No"
    return "Unknown"


def ref_score_rows(rows):
    """vlmeval/dataset/image_yorn.py ``ImageYORNDataset.evaluate``: extracted, then score = answer == extracted."""
    for row in rows:
        row["extracted"] = ref_yorn_extraction(str(row["prediction"]))
        row["score"] = row["answer"] == row["extracted"]
    return rows


def _mean(values):
    values = list(values)
    return sum(values) / len(values)


def ref_pope_rating(rows):
    """vlmeval/dataset/utils/yorn.py ``POPE_rating`` (its ``cal_f1_score``), one dict per split."""

    def cal_f1_score(y_true, y_pred):
        tp = sum(t == 1 and p == 1 for t, p in zip(y_true, y_pred, strict=True))
        fp = sum(t == 0 and p == 1 for t, p in zip(y_true, y_pred, strict=True))
        fn = sum(t == 1 and p == 0 for t, p in zip(y_true, y_pred, strict=True))
        precision = tp / (tp + fp) if (tp + fp) != 0 else 0
        recall = tp / (tp + fn) if (tp + fn) != 0 else 0
        f1_score = 2 * (precision * recall) / (precision + recall) if (precision + recall) != 0 else 0
        return f1_score, precision, recall

    data = [dict(row, category=c) for row in ref_score_rows(rows) for c in row["category"].split(",")]  # explode

    def rate(sub):
        y_true = [1 if i == "Yes" else 0 for i in (r["answer"] for r in sub)]
        y_pred = [1 if i == "Yes" else 0 for i in (r["extracted"] for r in sub)]
        f1_score, precision, recall = cal_f1_score(y_true, y_pred)
        acc = _mean(r["score"] for r in sub) * 100
        return {"Overall": f1_score * 100, "acc": acc, "precision": precision * 100, "recall": recall * 100}

    res = {"Overall": rate(data)}
    for c in set(r["category"] for r in data):
        res[c] = rate([r for r in data if r["category"] == c])
    return res


def ref_mme_rating(rows):
    """vlmeval/dataset/utils/yorn.py ``MME_rating``."""
    stats = defaultdict(dict)
    for item in ref_score_rows(rows):
        category, image_path, score = item["category"], item["image_path"], item["score"]
        if image_path not in stats[category]:
            stats[category][image_path] = []
        stats[category][image_path].append(score)

    def acc(key, mode="normal"):
        values = []
        for val in stats[key].values():
            if mode == "normal":
                values.extend(val)
            elif mode == "plus":
                values.append(val[0] * val[1])
        return _mean(values) * 100

    scores = {k: acc(k) + acc(k, "plus") for k in stats}
    super_cates = dict(
        perception=[
            "OCR",
            "artwork",
            "celebrity",
            "color",
            "count",
            "existence",
            "landmark",
            "position",
            "posters",
            "scene",
        ],
        reasoning=["code_reasoning", "commonsense_reasoning", "numerical_calculation", "text_translation"],
    )
    ret = {sc: sum(scores[c] for c in cate_list) for sc, cate_list in super_cates.items()}
    ret.update(scores)
    return ret


def ref_hallusion_rating(rows):
    """vlmeval/dataset/utils/yorn.py ``Hallusion_rating`` (``calc_aAcc``/``calc_fAcc``/``calc_qAcc``,
    lowercased here for the linter);
    the headline is image_yorn.py ``report_primary_metric``'s mean of the three overall figures."""

    def calc_facc(data):
        res = defaultdict(list)
        for line in data:
            res[f"{line['l2-category']}_{line['set_id']}_{line['figure_id']}"].append(line["score"])
        return _mean(all(x) for x in res.values()) * 100

    def calc_qacc(data):
        res = defaultdict(list)
        for line in data:
            res[f"{line['l2-category']}_{line['set_id']}_{line['question_id']}"].append(line["score"])
        return _mean(all(x) for x in res.values()) * 100

    def calc_aacc(data):
        return _mean(line["score"] for line in data) * 100

    data = ref_score_rows(rows)
    for line in data:
        line["set_id"], line["figure_id"], line["question_id"] = line["index"].split("_")[3:6]
    res = {"Overall": (calc_aacc(data), calc_facc(data), calc_qacc(data))}
    for column in ("category", "l2-category"):
        for c in set(line[column] for line in data):
            sub = [line for line in data if line[column] == c]
            res[c] = (calc_aacc(sub), calc_facc(sub), calc_qacc(sub))
    return res


# --- predictions that exercise the rules ---------------------------------------------------------------

EDGE_PREDICTIONS = [
    "Yes",
    "No.",
    "YES!",
    "no",
    "yes and no",
    "Yes, there is a dog but no cat.",
    "It could be yes or no",
    "There is no dog.",
    "I do not think so",
    "not sure",
    "<answer>Yes</answer>",
    "<b>No</b>",
    "**Yes**",
    "Yes:",
    "'yes'",
    "yes/no",
    "yes_no",
    "yes,no",
    "(yes)",
    "answer: ( no )",
    "\\boxed{yes}",
    "No, 3,5 of them",
    "Yes,I count 1,2",
    "yes,no 1,2",
    "No—definitely",
    "no-one is there",
    "It's a yes",
    "." * 40 + "yes",
    "." * 20 + "yes",
    "Yes.\nNo.",
    "Yes\tindeed",
    "[No]",
    "yes.no",
    "yes. 5.5",
    "",
]


def _gold(answer):
    return answer.lower()


@pytest.mark.parametrize("text", EDGE_PREDICTIONS)
def test_yes_no_reading_agrees_with_yorn_extraction(text):
    expected = {"Yes": "yes", "No": "no", "Unknown": None}[ref_yorn_extraction(text)]
    assert parse_yes_no(text) == expected


def test_edge_cases_cover_both_words_markup_and_period_limit():
    readings = {t: ref_yorn_extraction(t) for t in EDGE_PREDICTIONS}
    assert readings["yes and no"] == "Unknown"  # both words: unreadable, not the first word
    assert readings["<answer>Yes</answer>"] == "Yes" and readings["**Yes**"] == "Unknown"
    assert readings["." * 40 + "yes"] == "Unknown" and readings["." * 20 + "yes"] == "Yes"  # 32-period cap


def _pope_rows():
    cats = ["adversarial,popular,random", "adversarial", "popular,random", "random", "adversarial,popular"]
    rows = []
    for i, pred in enumerate(EDGE_PREDICTIONS):
        answer = "Yes" if i % 3 else "No"
        rows.append({"index": i, "category": cats[i % len(cats)], "answer": answer, "prediction": pred})
    return rows


def test_pope_aggregates_equal_pope_rating():
    rows = _pope_rows()
    items = [
        ScoredItem(id=str(r["index"]), prediction=r["prediction"], reference=_gold(r["answer"]), subset=r["category"])
        for r in rows
    ]
    m = score_items("pope", items, "f1").metrics
    ref = ref_pope_rating(_pope_rows())
    assert set(ref) == {"Overall", "adversarial", "popular", "random"}
    assert m["score"] == pytest.approx(ref["Overall"]["Overall"])
    for split, vals in ref.items():
        prefix = "" if split == "Overall" else f"{split}/"
        assert m[f"{prefix}f1"] == pytest.approx(vals["Overall"]), split
        for name in ("acc", "precision", "recall"):
            assert m[f"{prefix}{name}"] == pytest.approx(vals[name]), (split, name)
    assert m["n"] == len(rows) and m["n_rows"] == sum(len(r["category"].split(",")) for r in rows)
    for r, it in zip(rows, items, strict=True):
        assert is_correct("pope", it) == (ref_yorn_extraction(r["prediction"]) == r["answer"])


def test_pope_unknown_subset_names_column_and_value():
    items = [ScoredItem(id="7", prediction="yes", reference="yes", subset="adversarial,coco")]
    with pytest.raises(ValueError, match=r"column 'category'.*'adversarial,coco'.*'coco' is not one of"):
        score_items("pope", items, "macro_accuracy")


MME_CATEGORIES = [
    "OCR",
    "artwork",
    "celebrity",
    "color",
    "count",
    "existence",
    "landmark",
    "position",
    "posters",
    "scene",
    "code_reasoning",
    "commonsense_reasoning",
    "numerical_calculation",
    "text_translation",
]


def _mme_rows():
    rows, k = [], 0
    for c, category in enumerate(MME_CATEGORIES):
        for image in range(2):
            # the same image_path in two categories: one pair in each (VLMEvalKit keys by category first)
            path = "shared.png" if image == 0 and category in ("count", "existence") else f"{category}/{image}.png"
            for answer in ("Yes", "No"):
                pred = EDGE_PREDICTIONS[(7 * c + 3 * image + k) % len(EDGE_PREDICTIONS)]
                rows.append(
                    {
                        "index": k,
                        "category": category,
                        "image_path": path,
                        "answer": answer,
                        "prediction": pred,
                    }
                )
                k += 1
    return rows


def test_mme_aggregates_equal_mme_rating():
    rows = _mme_rows()
    items = [
        ScoredItem(
            id=str(r["index"]),
            prediction=r["prediction"],
            reference=_gold(r["answer"]),
            category=r["category"],
            group=r["image_path"],
        )
        for r in rows
    ]
    m = score_items("mme", items).metrics
    ref = ref_mme_rating(_mme_rows())
    assert m["perception"] == pytest.approx(ref["perception"])
    assert m["cognition"] == pytest.approx(ref["reasoning"]) == pytest.approx(m["reasoning"])
    assert m["score"] == pytest.approx(ref["perception"] + ref["reasoning"])
    for category in MME_CATEGORIES:
        assert m[category] == pytest.approx(ref[category]), category


def _item(index, category, extra, image=b"same picture"):
    return Item(
        index=index,
        image_bytes=image,
        question="q",
        options={},
        answer="Yes",
        category=category,
        family="",
        subset="",
        trace="",
        scene="",
        extra=extra,
    )


def test_protocol_pairs_mme_by_image_path_and_reads_l2_category():
    spec = compose_bench("mme")
    a = scored_item(_item(1, "existence", {"image_path": "a.jpg"}), spec, "yes")
    b = scored_item(_item(2, "existence", {"image_path": "b.jpg"}), spec, "yes")
    assert (a.group, b.group) == ("a.jpg", "b.jpg")  # same picture, two files: two pairs
    hall = compose_bench("hallusionbench")
    assert scored_item(_item(3, "VD", {"l2-category": "chart"}), hall, "yes").subset == "chart"


def _hallusion_rows():
    rows, k = [], 0
    for category, l2 in (("VD", "illusion"), ("VD", "math"), ("VS", "chart"), ("VS", "map")):
        for set_id in range(2):
            for figure in range(2):
                for question in range(2):
                    answer = "Yes" if (figure + question + set_id) % 2 == 0 else "No"
                    # figure 0 of set 0 all right: a right figure whose questions fail on figure 1
                    right = f"{answer}." if (set_id, figure) == (0, 0) else None
                    pred = right or EDGE_PREDICTIONS[(5 * k + 1) % len(EDGE_PREDICTIONS)]
                    index = f"{category}_{l2}_{k}_{set_id}_{figure}_{question}"
                    rows.append(
                        {
                            "index": index,
                            "category": category,
                            "l2-category": l2,
                            "answer": answer,
                            "prediction": pred,
                        }
                    )
                    k += 1
    return rows


def test_hallusionbench_aggregates_equal_hallusion_rating():
    rows = _hallusion_rows()
    items = [
        ScoredItem(
            id=r["index"],
            prediction=r["prediction"],
            reference=_gold(r["answer"]),
            category=r["category"],
            subset=r["l2-category"],
        )
        for r in rows
    ]
    m = score_items("hallusionbench", items).metrics
    ref = ref_hallusion_rating(_hallusion_rows())
    assert (m["aAcc"], m["fAcc"], m["qAcc"]) == pytest.approx(ref["Overall"])
    assert m["score"] == pytest.approx(sum(ref["Overall"]) / 3)
    assert len(set(ref["Overall"])) == 3  # aAcc, fAcc and qAcc differ on these rows
    for split, (a, f, q) in ref.items():
        if split != "Overall":
            assert (m[f"{split}/aAcc"], m[f"{split}/fAcc"], m[f"{split}/qAcc"]) == pytest.approx((a, f, q)), split


def test_hallusionbench_index_without_ids_is_an_error():
    with pytest.raises(ValueError, match="column 'index'"):
        score_items("hallusionbench", [ScoredItem(id="12", prediction="yes", reference="yes", subset="chart")])


def test_runner_names_the_file_when_pope_refuses_a_category():
    from sparsectx.eval.runner import _result

    spec = compose_bench("pope", ["bench.pope.path=data/POPE.tsv"])
    item = _item(5, "adversarial,coco", {})
    with pytest.raises(ValueError, match=r"data/POPE\.tsv.*column 'category'.*'adversarial,coco'"):
        _result(None, spec, ([item], [], []), [{"answer": "yes"}], {}, {}, 0, None)  # raises before the rest
