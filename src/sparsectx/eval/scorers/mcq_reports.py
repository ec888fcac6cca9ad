"""The multiple-choice benchmarks whose official report is not the plain mean hit: MMMU, HR-Bench, CV-Bench.

Both read each answer as ``mcq_vlmeval`` does (``sparsectx.eval.scorers.mcq.vlmeval_choice``, VLMEvalKit's
exact-matching ``can_infer``).

* **MMMU** (``mmmu_vlmeval``): vlmeval/dataset/utils/multiple_choice.py ``MMMU_preproc`` turns an open
  question (no option ``A``) into a two-option one, ``A`` = the gold answer text and ``B`` = ``"Other
  Answers"``, and ``mcq_vanilla_eval`` maps a gold that is not an upper-case letter to ``A``; then
  ``report_acc``. So an open answer scores when its reading is ``A`` (the answer's text found in it, or
  the letter ``A`` itself) and not ``B``.
* **HR-Bench** (``hrbench``): vlmeval/dataset/utils/hrbench.py ``report_acc_hrbench`` groups the rows by
  ``cycle_category`` and takes, per cycle, ``hrbench_score``'s accuracy over all rows (``all``) and per
  ``category``; the ``Average`` row of each is the sum over cycles divided by the number of cycles (a
  category absent from a cycle still divides by all cycles, as there). ``score`` is 100 x ``Average``
  ``all``. The benchmark config fills ``ScoredItem.subset`` from ``cycle_category``.

* **CV-Bench** (``cvbench``): its authors' rule (nyu-visionx/CV-Bench README, "Accuracy"): the accuracy per
  image ``source`` (ADE20K, COCO, Omni3D), 2D = the mean of ADE20K's and COCO's, 3D = Omni3D's, and the
  headline the mean of 2D and 3D. nvidia-vlmeval 26.3 has no CV-Bench class to compare with; each answer
  is read by ``mcq_vlmeval``'s rule. The benchmark config fills ``ScoredItem.subset`` from ``source``.

Remaining differences from VLMEvalKit: MMMU's ``report_acc`` reports each ``split`` (dev, validation) and
``category``; here ``score`` is over every scored row, per ``category`` (the split is not carried).
"""

from __future__ import annotations

import string
from collections.abc import Sequence

from sparsectx.eval.scorers.base import ScoredItem, accuracy_metrics, count_missing, per_key_accuracy
from sparsectx.eval.scorers.mcq import (
    MCQ_COLUMNS,
    VLMEVAL_CHOICE_JUDGED,
    choice_verdict,
    is_choice_correct_vlmeval,
    one_split_overall,
    vlmeval_choice,
)
from sparsectx.eval.scorers.spec import BY_SUBSET, ITEM_MEAN, JudgedAnswers, ScorerSpec, VlmevalReading

UPPER = frozenset(string.ascii_uppercase)
OPEN_OTHER = "Other Answers"
"""``MMMU_preproc``'s second option for an open question."""


def mmmu_question(item: ScoredItem) -> tuple[dict[str, str], str]:
    """Returns (options, gold letter) of an MMMU item after ``MMMU_preproc`` and ``mcq_vanilla_eval``."""
    options = dict(item.options)
    if "A" not in options:
        options = {**options, "A": item.reference, "B": OPEN_OTHER}
    gold = item.reference.strip()
    return options, gold if gold in UPPER else "A"


def is_mmmu_correct(item: ScoredItem) -> bool:
    """Returns whether VLMEvalKit's exact matching reads the MMMU gold letter in ``item.prediction``."""
    options, gold = mmmu_question(item)
    return vlmeval_choice(item.prediction, options) == gold


def mmmu_options(item: ScoredItem) -> dict[str, str]:
    """Returns the options an MMMU item is read against (``MMMU_preproc``'s for an open question)."""
    return mmmu_question(item)[0]


def undecided_mmmu(item: ScoredItem) -> bool:
    """Returns whether VLMEvalKit's ``can_infer`` reads no option of ``mmmu_options`` in the prediction."""
    return vlmeval_choice(item.prediction, mmmu_options(item)) is None


def score_mmmu_vlmeval(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns MMMU accuracy in percent with open questions as ``MMMU_preproc`` reformulates them.

    Reads ``reference`` (a letter, or an open question's answer text), ``options`` (empty for an open
    question) and ``category``. Keys: ``score``, ``n``, ``missing``, ``unmatched``, ``open``,
    ``category/<name>``.
    """
    correct = [is_mmmu_correct(item) for item in items]
    unmatched = sum(
        item.prediction is not None and vlmeval_choice(item.prediction, mmmu_question(item)[0]) in (None, "Z")
        for item in items
    )
    metrics = accuracy_metrics(items, correct, "unmatched", unmatched)
    return {**metrics, "open": float(sum("A" not in item.options for item in items))}


def score_hrbench(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns HR-Bench's cycle-averaged accuracy in percent (``report_acc_hrbench``'s ``Average`` ``all``).

    Reads ``reference`` (gold letter), ``options``, ``category`` and ``subset`` (``cycle_category``).
    Keys: ``score``, ``n``, ``missing``, ``cycle/<cycle>`` (a cycle's accuracy over all its rows),
    ``category/<name>`` (the Average over cycles), ``cycle/<cycle>/<category>``.
    """
    cycles: dict[str, list[tuple[str, bool]]] = {}
    for item in items:
        hit = vlmeval_choice(item.prediction, item.options) == item.reference.strip()
        cycles.setdefault(item.subset, []).append((item.category, hit))
    metrics: dict[str, float] = {}
    average: dict[str, float] = {}
    for cycle, rows in sorted(cycles.items()):
        per = {"all": rows}
        for category in sorted({c for c, _ in rows}):
            per[category] = [(c, hit) for c, hit in rows if c == category]
        for task, task_rows in per.items():
            accuracy = 100.0 * sum(hit for _, hit in task_rows) / len(task_rows)
            metrics[f"cycle/{cycle}" if task == "all" else f"cycle/{cycle}/{task}"] = accuracy
            average[task] = average.get(task, 0.0) + accuracy
    for task, total in average.items():
        if task != "all":
            metrics[f"category/{task}"] = total / len(cycles)
    return {
        "score": average["all"] / len(cycles),
        "n": float(len(items)),
        "missing": float(count_missing(items)),
        **metrics,
    }


CVBENCH_SOURCES = {"2D": ("ADE20K", "COCO"), "3D": ("Omni3D",)}
"""CV-Bench's image sources per task type (its README's accuracy formula)."""
CVBENCH_KNOWN = tuple(source for sources in CVBENCH_SOURCES.values() for source in sources)


def cvbench_source(item: ScoredItem) -> str:
    """Returns the item's image source; raises ``ValueError`` naming the item when it is not one of CV-Bench's."""
    if item.subset not in CVBENCH_KNOWN:
        raise ValueError(
            f"cvbench: item {item.id!r} has source {item.subset!r}, which is not one of {sorted(CVBENCH_KNOWN)}; "
            "the benchmark file's `source` column must name each row's image source (bench.cvbench.subset_field: "
            "source)"
        )
    return item.subset


def score_cvbench(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns CV-Bench accuracy in percent: the mean of 2D (mean of ADE20K and COCO) and 3D (Omni3D).

    Reads ``reference`` (gold letter), ``options`` and ``subset`` (the ``source`` column). Keys: ``score``,
    ``n``, ``missing``, ``2D``, ``3D``, ``source/<name>``, ``category/<task>``.

    Raises:
        ValueError: an item's source is not one of CV-Bench's three, or a source has no item (the formula
            would average over a part that is not there).
    """
    for item in items:
        cvbench_source(item)
    correct = [vlmeval_choice(item.prediction, item.options) == item.reference.strip() for item in items]
    by_source = per_key_accuracy(((it.subset, ok) for it, ok in zip(items, correct, strict=True)), "source")
    absent = sorted(set(CVBENCH_KNOWN) - {key.split("/", 1)[1] for key in by_source})
    if absent:
        raise ValueError(f"cvbench: no item from source {absent}; CV-Bench's accuracy averages all three")
    parts = {
        kind: sum(by_source[f"source/{s}"] for s in sources) / len(sources) for kind, sources in CVBENCH_SOURCES.items()
    }
    metrics = accuracy_metrics(items, correct, "unmatched", 0)
    unmatched = sum(
        item.prediction is not None and vlmeval_choice(item.prediction, item.options) in (None, "Z") for item in items
    )
    return {
        **metrics,
        "unmatched": float(unmatched),
        "score": (parts["2D"] + parts["3D"]) / 2,
        **parts,
        **by_source,
    }


SPECS = (
    ScorerSpec(
        name="mmmu_vlmeval",
        version=1,
        fn=score_mmmu_vlmeval,
        is_correct=is_mmmu_correct,
        resampling=ITEM_MEAN,
        needs=("reference",),
        judge=JudgedAnswers(template="choice", undecided=undecided_mmmu, verdict=choice_verdict, options=mmmu_options),
        vlmeval=VlmevalReading(
            ("question", "answer"), one_split_overall, "score", "report_acc Overall x 100 (MMMU_preproc)"
        ),
    ),
    ScorerSpec(
        name="hrbench",
        version=1,
        fn=score_hrbench,
        is_correct=is_choice_correct_vlmeval,
        resampling=BY_SUBSET,  # the mean of the cycles' accuracies
        needs_options=True,
        needs=("reference", "options", "subset"),
        judge=VLMEVAL_CHOICE_JUDGED,
        vlmeval=VlmevalReading(
            (*MCQ_COLUMNS, "category", "cycle_category"),
            lambda m: 100.0 * m["Average/all/accuracy"],
            "score",
            "report_acc_hrbench Average all x 100",
        ),
    ),
    ScorerSpec(
        name="cvbench",
        version=1,
        fn=score_cvbench,
        is_correct=is_choice_correct_vlmeval,
        resampling=BY_SUBSET,  # the mean over image sources
        needs_options=True,
        needs=("reference", "options", "subset"),
        rules={"subset": cvbench_source},
        judge=VLMEVAL_CHOICE_JUDGED,
    ),
)
