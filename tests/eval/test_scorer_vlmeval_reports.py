"""HR-Bench's cycle average, MMMU's open questions (literal transcriptions of VLMEvalKit's code) and
CV-Bench's source average (its authors' formula).

References: vlmeval/dataset/utils/hrbench.py ``report_acc_hrbench`` + ``hrbench_score`` and
vlmeval/dataset/utils/multiple_choice.py ``MMMU_preproc`` + the ``answer_map`` of ``mcq_vanilla_eval``,
with the per-item reading ``ref_extract_exact`` (``extract_answer_from_item`` with ``model=None``) of the
MCQ rule tests. The items go through the runner's own ``scored_item`` (HR-Bench's ``cycle_category``
column, MMMU's empty options), so the config path is checked too.
"""

from __future__ import annotations

import string
from dataclasses import replace

import pytest

from sparsectx.data.tsv import Item
from sparsectx.eval.config import BenchSpec, compose_bench
from sparsectx.eval.protocol import is_correct, scored_item
from sparsectx.eval.scorers import score_items

from .test_scorer_vlmeval_mcq_exact import ref_extract_exact

# --- references: VLMEvalKit (open-compass/VLMEvalKit) -------------------------------------------------


def ref_hrbench_score(rows):
    """vlmeval/dataset/utils/hrbench.py ``hrbench_score`` (its ``resp_dic``)."""
    score_dict = {}
    for row in rows:
        score_dict.setdefault(row["category"], []).append(row["hit"])
        score_dict.setdefault("all", []).append(row["hit"])
    return {key: sum(values) / len(values) for key, values in score_dict.items()}


def ref_report_acc_hrbench(rows):
    """vlmeval/dataset/utils/hrbench.py ``report_acc_hrbench``: {(cycle, type): accuracy}, with Average."""
    out, avg, count = {}, {}, 0
    for cycle in sorted({row["cycle_category"] for row in rows}):
        count += 1
        for task, accuracy in ref_hrbench_score([r for r in rows if r["cycle_category"] == cycle]).items():
            out[(cycle, task)] = accuracy
            avg[task] = avg.get(task, 0) + accuracy
    for task, total in avg.items():
        out[("Average", task)] = total / count
    return out


def ref_mmmu_rows(rows):
    """``MMMU_preproc`` (A = answer, B = 'Other Answers' where A is missing) and ``mcq_vanilla_eval``'s
    answer_map (a gold that is not an upper-case letter becomes 'A'), then the exact-matching hit."""
    out = []
    for row in rows:
        options = {k: row[k] for k in string.ascii_uppercase if row.get(k)}
        if "A" not in options:
            options = {**options, "A": row["answer"], "B": "Other Answers"}
        gold = row["answer"] if row["answer"] in list(string.ascii_uppercase) else "A"
        out.append(ref_extract_exact(row["prediction"], options) == gold)
    return out


# --- cases ------------------------------------------------------------------------------------------------


def _item(index, question, options, answer, category, extra=None) -> Item:
    return Item(index, b"", question, options, answer, category, "", "", "", "", extra or {})


def _spec(scorer: str, subset_field: str = "none") -> BenchSpec:
    """Returns MMStar's config (a plain multiple-choice layout) with ``scorer`` and ``subset_field`` set."""
    return replace(compose_bench("mmstar"), scorer=scorer, subset_field=subset_field)


OPTIONS = {"A": "cat", "B": "dog", "C": "bird", "D": "fish"}
HR_ROWS = [  # (cycle, category, gold, prediction): cycles of unequal sizes, a category absent in cycle 2
    ("1", "single", "A", "A"),
    ("1", "single", "B", "The answer is B."),
    ("1", "cross", "C", "D"),
    ("1", "cross", "D", "fish"),
    ("1", "single", "A", "I think C or D"),
    ("2", "single", "B", "B"),
    ("2", "single", "C", "bird"),
    ("3", "cross", "A", "Sorry, I cannot answer."),
    ("3", "single", "D", "D."),
    ("3", "cross", "B", "cat"),
    ("3", "single", "C", "C"),
]


def test_hrbench_averages_cycles_as_report_acc_hrbench():
    spec = _spec("hrbench", "cycle_category")
    items = [
        scored_item(_item(i, "q", OPTIONS, gold, cat, {"cycle_category": cyc}), spec, pred)
        for i, (cyc, cat, gold, pred) in enumerate(HR_ROWS)
    ]
    rows = [
        {"cycle_category": cyc, "category": cat, "hit": ref_extract_exact(pred, OPTIONS) == gold}
        for cyc, cat, gold, pred in HR_ROWS
    ]
    ref = ref_report_acc_hrbench(rows)
    got = score_items("hrbench", items).metrics
    assert got["score"] == pytest.approx(100 * ref[("Average", "all")])
    for (cycle, task), accuracy in ref.items():
        key = (
            f"category/{task}" if cycle == "Average" else f"cycle/{cycle}" if task == "all" else f"cycle/{cycle}/{task}"
        )
        if (cycle, task) != ("Average", "all"):
            assert got[key] == pytest.approx(100 * accuracy), key
    plain = 100 * sum(r["hit"] for r in rows) / len(rows)
    assert got["score"] != pytest.approx(plain)  # unequal cycles: not the plain mean
    assert [is_correct("hrbench", it) for it in items] == [r["hit"] for r in rows]


MMMU_ROWS = [  # (options, gold, prediction): open questions have no options and a text gold
    (OPTIONS, "B", "B"),
    (OPTIONS, "C", "The answer is bird"),
    ({}, "42", "The answer is 42"),
    ({}, "42", "41"),
    ({}, "x^2", "A"),
    ({}, "Paris", "B"),
    ({}, "7", "Other Answers"),
    (OPTIONS, "A", "dog"),
    ({}, "blue", "It is blue."),
    ({}, "3", None),
]


def test_mmmu_open_questions_follow_mmmu_preproc():
    spec = _spec("mmmu_vlmeval")
    items = [
        scored_item(_item(i, "q", opts, gold, "Art" if i % 2 else "Math"), spec, pred)
        for i, (opts, gold, pred) in enumerate(MMMU_ROWS)
    ]
    ref = ref_mmmu_rows([{**opts, "answer": gold, "prediction": str(pred)} for opts, gold, pred in MMMU_ROWS])
    assert [is_correct("mmmu_vlmeval", it) for it in items] == ref
    got = score_items("mmmu_vlmeval", items).metrics
    assert got["score"] == pytest.approx(100 * sum(ref) / len(ref)) and got["open"] == 7
    assert 0 < sum(ref) < len(ref)
    with pytest.raises(ValueError, match="empty ScoredItem.options"):
        score_items("mcq_vlmeval", items)  # the plain MCQ scorer refuses open questions


# --- CV-Bench: its authors' formula (nyu-visionx/CV-Bench README, "Accuracy" and its example code) ------


def ref_cvbench(rows):
    """The README's example: accuracy per source, 2D = mean(ADE20K, COCO), 3D = Omni3D, combined = mean."""

    def accuracy(source):
        hits = [r["result"] for r in rows if r["source"] == source]
        return sum(hits) / len(hits)

    two_d = (accuracy("ADE20K") + accuracy("COCO")) / 2
    three_d = accuracy("Omni3D")
    return {"combined": (two_d + three_d) / 2, "2D": two_d, "3D": three_d}


CV_ROWS = [  # (source, gold, prediction): sources of unequal sizes, so the formula is not the plain mean
    ("ADE20K", "A", "A"),
    ("ADE20K", "B", "(B) dog"),
    ("ADE20K", "C", "D"),
    ("COCO", "A", "cat"),
    ("COCO", "B", "C"),
    ("COCO", "D", "D"),
    ("COCO", "A", "A"),
    ("COCO", "C", "no idea"),
    ("Omni3D", "A", "B"),
    ("Omni3D", "B", "B"),
]


def test_cvbench_averages_sources_as_its_authors_formula():
    spec = _spec("cvbench", "source")
    items = [
        scored_item(_item(i, "q", OPTIONS, gold, "Count", {"source": src}), spec, pred)
        for i, (src, gold, pred) in enumerate(CV_ROWS)
    ]
    rows = [{"source": s, "result": ref_extract_exact(p, OPTIONS) == g} for s, g, p in CV_ROWS]
    ref = ref_cvbench(rows)
    got = score_items("cvbench", items).metrics
    assert got["score"] == pytest.approx(100 * ref["combined"])
    assert got["2D"] == pytest.approx(100 * ref["2D"]) and got["3D"] == pytest.approx(100 * ref["3D"])
    assert got["score"] != pytest.approx(100 * sum(r["result"] for r in rows) / len(rows))
    assert [is_correct("cvbench", it) for it in items] == [r["result"] for r in rows]


def test_cvbench_refuses_unknown_or_absent_sources():
    spec = _spec("cvbench", "source")
    bad = [scored_item(_item(0, "q", OPTIONS, "A", "Count", {"source": "KITTI"}), spec, "A")]
    with pytest.raises(ValueError, match=r"source 'KITTI', which is not one of"):
        score_items("cvbench", bad)
    two_d_only = [
        scored_item(_item(i, "q", OPTIONS, "A", "Count", {"source": s}), spec, "A")
        for i, s in enumerate(["ADE20K", "COCO"])
    ]
    with pytest.raises(ValueError, match=r"no item from source \['Omni3D'\]"):
        score_items("cvbench", two_d_only)
