"""The multiple-choice benchmarks whose VLMEvalKit report is not the plain mean hit: MMMU and HR-Bench.

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

Remaining differences from VLMEvalKit: MMMU's ``report_acc`` reports each ``split`` (dev, validation) and
``category``; here ``score`` is over every scored row, per ``category`` (the split is not carried).
"""

from __future__ import annotations

import string
from collections.abc import Sequence

from sparsectx.eval.scorers.base import (
    ScoredItem,
    accuracy_metrics,
    check_items,
    count_missing,
    register_scorer,
)
from sparsectx.eval.scorers.mcq import vlmeval_choice

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


@register_scorer("mmmu_vlmeval", 1)
def score_mmmu_vlmeval(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns MMMU accuracy in percent with open questions as ``MMMU_preproc`` reformulates them.

    Reads ``reference`` (a letter, or an open question's answer text), ``options`` (empty for an open
    question) and ``category``. Keys: ``score``, ``n``, ``missing``, ``unmatched``, ``open``,
    ``category/<name>``.
    """
    check_items(items, "mmmu_vlmeval", needs=("reference",))
    correct = [is_mmmu_correct(item) for item in items]
    unmatched = sum(
        item.prediction is not None and vlmeval_choice(item.prediction, mmmu_question(item)[0]) in (None, "Z")
        for item in items
    )
    metrics = accuracy_metrics(items, correct, "unmatched", unmatched)
    return {**metrics, "open": float(sum("A" not in item.options for item in items))}


@register_scorer("hrbench", 1)
def score_hrbench(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns HR-Bench's cycle-averaged accuracy in percent (``report_acc_hrbench``'s ``Average`` ``all``).

    Reads ``reference`` (gold letter), ``options``, ``category`` and ``subset`` (``cycle_category``).
    Keys: ``score``, ``n``, ``missing``, ``cycle/<cycle>`` (a cycle's accuracy over all its rows),
    ``category/<name>`` (the Average over cycles), ``cycle/<cycle>/<category>``.
    """
    check_items(items, "hrbench", needs=("reference", "options", "subset"))
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
        "score": average["all"] / len(cycles), "n": float(len(items)), "missing": float(count_missing(items)),
        **metrics,
    }  # fmt: skip
