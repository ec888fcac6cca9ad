"""The tables show POPE's configured headline: conf/bench/syn_pope.yaml's macro accuracy (LT-OPD App. D.1), with
its interval the bootstrap of that same metric, not VLMEvalKit's pooled F1 (the leaves of ``test_intervals``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sparsectx.eval.config import compose_bench
from sparsectx.eval.scorers import ScoredItem, score_items
from sparsectx.report.bootstrap import draw_counts, interval, layout, replicates, stream
from sparsectx.report.study import run

from .test_intervals import RIGHT, N, bench_items, compose_tables, read_csv, results  # noqa: F401 (fixture)


def test_the_pope_column_is_the_macro_accuracy_and_its_interval(results: Path) -> None:  # noqa: F811
    assert compose_bench("syn_pope").headline == "macro_accuracy"
    run(compose_tables(results))
    row = read_csv(results / "tiny" / "tables" / "main.csv")[("0.1", "Vanilla")]
    right = RIGHT[("base", 0.1)]
    items = bench_items("syn_pope")
    # by hand: per subset, the share of its rows answered right; then the mean of the three
    accs = [100.0 * np.mean([it.index in right for it in items if it.subset == s]) for s in {i.subset for i in items}]
    macro = float(np.mean(accs))
    assert row["syn_pope"] == f"{macro:.2f}"
    scored = [
        ScoredItem(
            str(it.index),
            it.answer if it.index in right else {"yes": "no", "no": "yes"}[it.answer],
            it.answer,
            subset=it.subset,
        )
        for it in items
    ]
    f1 = score_items("pope", scored, "f1").metrics["score"]
    assert f"{f1:.2f}" != row["syn_pope"]  # the other headline would show another number
    lay = layout("pope", scored, "macro_accuracy")
    lo, hi = interval(replicates(lay, scored, draw_counts(lay, 1000, stream(0, "items", "syn_pope"))), 0.95)
    assert (row["syn_pope lo"], row["syn_pope hi"]) == (f"{lo:.2f}", f"{hi:.2f}")
    assert len(items) == N and lo < macro < hi
