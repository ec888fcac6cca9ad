"""``make_tables`` with per-item records: intervals in every format, paired differences, seeds, refusals.

A fake results tree whose leaves carry what ``evaluate.py`` writes (result JSON with its provenance, the
predictions JSONL) over small benchmark files written here: a number-match benchmark and a POPE one.
"""

from __future__ import annotations

import csv
import io
import statistics
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from matplotlib.container import ErrorbarContainer
from omegaconf import DictConfig, OmegaConf
from PIL import Image

from sparsectx import workflow as wf
from sparsectx.data.tsv import Item, write_tsv
from sparsectx.eval.config import compose_bench
from sparsectx.eval.results import BenchResult, as_dict, write_json, write_rows
from sparsectx.eval.scorers import ScoredItem, score_items
from sparsectx.hashing import file_sha256
from sparsectx.paths import leaf_dir, predictions_path, result_path
from sparsectx.report.bootstrap import draw_counts, interval, layout, replicates, stream
from sparsectx.report.plots import retain_figure
from sparsectx.report.study import load_tables_config, run

N = 30
BENCHES = ["syn_count", "syn_pope"]
HEADLINE = {"syn_pope": "macro_accuracy"}
"""The headline of a benchmark whose scorer reports several (conf/bench/syn_pope.yaml's)."""
GRID = {
    "pruners": {"visionzip": {}},
    "benchmarks": {"syn_count": {}, "syn_pope": {}},
    "methods": {"scopd": {"pruner": "visionzip", "budgets": [0.1]}},
    "tables": {
        "main": {
            "models": ["tiny"],
            "benchmarks": BENCHES,
            "rows": [{"methods": ["base", "scopd"], "pruners": ["visionzip"], "budgets": [1.0, 0.1]}],
        }
    },
    "passk": None,
    "efficiency": None,
}


def png() -> bytes:
    """Returns a 4x4 black PNG."""
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buffer, format="PNG")
    return buffer.getvalue()


PNG = png()
RIGHT = {  # (method, budget) -> items answered right, by position
    ("base", 1.0): set(range(0, 24)),
    ("scopd", 1.0): set(range(0, 24)),
    ("base", 0.1): set(range(0, 15)),
    ("scopd", 0.1): set(range(0, 16)),  # one more item right than the untrained model at 10%
}


def bench_items(bench: str, n: int = N) -> list[Item]:
    """Returns the benchmark's rows: numbers 0..N-1 (syn_count) or yes/no questions in three subsets."""
    subsets = ("random", "popular", "adversarial")
    return [
        Item(
            index=i,
            image_bytes=PNG,
            question=f"q{i}",
            options={},
            answer=str(i) if bench == "syn_count" else ("yes" if i % 2 else "no"),
            category="",
            family="",
            subset=subsets[i % 3] if bench == "syn_pope" else "",
            trace="",
            scene="",
            extra={},
        )
        for i in range(n)
    ]


def write_leaf(root: Path, data: Path, method: str, budget: float, bench: str, right: set[int], n: int = N) -> None:
    """Writes one leaf's result JSON and predictions over ``n`` items, answering those in ``right`` correctly."""
    tsv = data / f"{bench}.tsv"
    items = bench_items(bench, n)
    wrong = {"syn_count": lambda it: "99", "syn_pope": lambda it: "no" if it.answer == "yes" else "yes"}[bench]
    answers = {str(it.index): it.answer if it.index in right else wrong(it) for it in items}
    scorer = "number_match" if bench == "syn_count" else "pope"
    scored = [
        ScoredItem(id=k, prediction=v, reference=it.answer, subset=it.subset)
        for (k, v), it in zip(answers.items(), items, strict=True)
    ]
    bench_spec = compose_bench(bench)
    report = score_items(scorer, scored, bench_spec.headline)
    spec = {**asdict(bench_spec), "path": str(tsv), "scorer": scorer, "max_new_tokens": 8}
    provenance = {
        "config_hash": "0" * 16,
        "inputs": {"bench_sha256": file_sha256(tsv)},
        "config": {"bench": {bench: spec}, "max_skip_fraction": 0.0},
    }
    result = BenchResult(
        method=method,
        pruner="visionzip",
        budget=budget,
        benchmark=bench,
        score=report.metrics["score"],
        scorer_version=report.scorer_version,
        scorer=scorer,
        extractor_version=1,
        metrics=report.metrics,
        dataset_name=bench,
        experiment="tiny",
        seed=0,
        pruner_params={},
        model={"name": "tiny"},
        n_rows=n,
        n_scored=n,
        n_skipped=0,
        skipped=[],
        n_dropped=0,
        drop_rows=[],
        extraction={"tagged": n},
        n_failed=0,
        n_truncated=0,
        mean_kept_visual=4.0,
        generation={},
        batch_size=4,
        resumed_rows=0,
        wall_time_s=1.0,
        provenance=provenance,
    )
    leaf = leaf_dir(root, "tiny", "tiny", method, "visionzip", budget)
    write_json(result_path(leaf, bench), as_dict(result))
    write_rows(predictions_path(leaf, bench), [{"id": k, "answer": v} for k, v in answers.items()])


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Returns a results root with every leaf of ``GRID`` (benchmark files under ``tmp_path/data``)."""
    data = tmp_path / "data"
    data.mkdir()
    for bench in BENCHES:
        write_tsv(data / f"{bench}.tsv", bench_items(bench))
    for (method, budget), right in RIGHT.items():
        for bench in BENCHES:
            write_leaf(tmp_path / "results", data, method, budget, bench, right)
    return tmp_path / "results"


def compose_tables(root: Path, *overrides: str) -> DictConfig:
    """Returns ``conf/make_tables.yaml`` for the tiny preset under ``root``, its grid keys replaced by ``GRID``."""
    with initialize_config_dir(version_base=None, config_dir=str(wf.CONF_DIR)):
        cfg = compose("make_tables", overrides=["experiment=tiny", f"results_root={root}", "logger=none", *overrides])
    for key, value in GRID.items():
        OmegaConf.update(cfg, f"grid.{key}", value, merge=False)
    return cfg


def read_csv(path: Path) -> dict[tuple[str, str], dict[str, str]]:
    """Returns the rows of a block CSV keyed by (budget, method)."""
    return {(r["budget"], r["method"]): r for r in csv.DictReader(io.StringIO(path.read_text()))}


def test_every_score_and_average_has_an_interval_in_every_format(results: Path) -> None:
    run(compose_tables(results))
    out = results / "tiny" / "tables"
    main = read_csv(out / "main.csv")
    full = main[("1", "Vanilla")]
    assert (full["Avg"], full["Avg lo"], full["Avg hi"]) == (
        "100.00",
        "100.00",
        "100.00",
    )  # its own reference
    for row in main.values():
        for column in [*BENCHES, "Avg"]:
            assert float(row[f"{column} lo"]) <= float(row[column]) <= float(row[f"{column} hi"])
    pruned = main[("0.1", "Vanilla")]
    assert float(pruned["syn_count lo"]) < 50.0 < float(pruned["syn_count hi"])  # 15 of 30 right
    md = (out / "main.md").read_text()
    assert f"| Vanilla | visionzip | <u>50.00</u> [{pruned['syn_count lo']}, {pruned['syn_count hi']}] |" in md
    assert "Intervals: [lo, hi] is the 95% percentile interval of a paired bootstrap over items" in md
    assert "(main.delta.md)" in md
    assert "\\scriptsize" in (out / "main.tex").read_text()
    assert (out / "main.delta.md").is_file() and (out / "main.delta.csv").is_file()
    assert (
        "Error bars" in (out / "retain_main_tiny.caption.md").read_text()
        if (out / "retain_main_tiny.png").exists()
        else True
    )


def test_differences_are_paired(results: Path) -> None:
    """SCOPD differs from the untrained model on one item of 30: paired, the difference is 0 or positive on
    every resample; independent resampling of the two rows would give an interval tens of points wide."""
    run(compose_tables(results))
    delta = read_csv(results / "tiny" / "tables" / "main.delta.csv")[("0.1", "SCOPD")]
    lo, hi = float(delta["syn_count lo"]), float(delta["syn_count hi"])
    assert delta["syn_count"] == "+3.33" and lo == 0.0 and hi <= 100.0 * 3 / N
    # the same two rows resampled independently (two streams): the interval an unpaired bootstrap would give
    items = {
        m: [ScoredItem(str(i), str(i) if i in RIGHT[(m, 0.1)] else "99", str(i)) for i in range(N)]
        for m in ("base", "scopd")
    }
    lay = layout("number_match", items["base"])
    independent = [replicates(lay, items[m], draw_counts(lay, 1000, stream(0, m))) for m in items]
    wide = interval(independent[1] - independent[0], 0.95)
    assert wide[0] < 0.0 and wide[1] - wide[0] > 3 * (hi - lo)


def test_significant_differences_are_marked(results: Path) -> None:
    run(compose_tables(results))
    out = results / "tiny" / "tables"
    main = read_csv(out / "main.csv")
    assert main[("0.1", "SCOPD")]["above_untrained"] == ""  # [0, 6.67] does not exclude 0
    # a trained row far above the untrained one: its difference interval excludes 0, so it gets an arrow
    data = results.parent / "data"
    for bench in BENCHES:
        write_leaf(results, data, "scopd", 0.1, bench, set(range(0, 27)))
    run(compose_tables(results))
    main = read_csv(out / "main.csv")
    assert main[("0.1", "SCOPD")]["above_untrained"] == "syn_count;syn_pope;Avg"
    assert " ↑ |" in (out / "main.md").read_text()


def test_same_seed_same_intervals_other_seed_other_intervals(results: Path) -> None:
    out = results / "tiny" / "tables" / "main.csv"
    run(compose_tables(results))
    first = out.read_text()
    run(compose_tables(results))
    assert out.read_text() == first
    run(compose_tables(results, "bootstrap.seed=1"))
    assert out.read_text() != first


def test_rows_from_several_seeds_show_mean_std_and_pooled_interval(results: Path) -> None:
    data = results.parent / "data"
    right = {1: set(range(0, 18)), 2: set(range(0, 21))}  # seed 0 (grid.seed) has 16 right
    for seed, items in right.items():
        for budget in (1.0, 0.1):
            for bench in BENCHES:
                write_leaf(results / f"seed{seed}", data, "scopd", budget, bench, items)
    run(compose_tables(results, "train_seeds=[0,1,2]"))
    out = results / "tiny" / "tables"
    row = read_csv(out / "main.csv")[("0.1", "SCOPD")]
    scores = [100.0 * k / N for k in (16, 18, 21)]
    assert row["syn_count"] == f"{statistics.fmean(scores):.2f}"
    assert row["syn_count std"] == f"{statistics.stdev(scores):.2f}"
    assert float(row["syn_count lo"]) < statistics.fmean(scores) < float(row["syn_count hi"])
    assert "± " in (out / "main.md").read_text() and "training seeds [0, 1, 2]" in (out / "main.md").read_text()
    assert read_csv(out / "main.csv")[("0.1", "Vanilla")]["syn_count std"] == ""  # untrained: no seeds


def test_too_few_items_fails_before_any_table_naming_the_key(tmp_path: Path) -> None:
    """4 items admit C(7, 4) = 35 distinct resamples: 35 may be asked for, 1000 (the default) not."""
    data, root = tmp_path / "data", tmp_path / "results"
    data.mkdir()
    for bench in BENCHES:
        write_tsv(data / f"{bench}.tsv", bench_items(bench, 6 if bench == "syn_pope" else 4))
        for (method, budget), right in RIGHT.items():
            write_leaf(root, data, method, budget, bench, right, 6 if bench == "syn_pope" else 4)
    with pytest.raises(ValueError, match=r"bootstrap.resamples=1000: benchmark 'syn_count' has too few items"):
        run(compose_tables(root))
    assert not (root / "tiny" / "tables").exists()
    run(compose_tables(root, "bootstrap.resamples=20", "bootstrap.level=0.5"))  # POPE: 3 strata of 2, 27
    # bootstrap.too_few=no_interval: the tables are written, the too-small benchmarks' cells without intervals
    run(compose_tables(root, "bootstrap.too_few=no_interval"))
    main = read_csv(root / "tiny" / "tables" / "main.csv")
    assert all(row["syn_count"] != "" and "syn_count lo" not in row for row in main.values())
    note = "No interval (bootstrap.resamples=1000: benchmark 'syn_count' has too few items for it (4 items"
    assert note in (root / "tiny" / "tables" / "main.md").read_text()


def test_a_repeated_seed_names_the_key(results: Path) -> None:
    with pytest.raises(ValueError, match=r"train_seeds=\[0, 1, 1\] repeats \[1\]"):
        load_tables_config(compose_tables(results, "train_seeds=[0,1,1]"))


def test_seeds_that_were_not_trained_fail_before_any_work(results: Path) -> None:
    with pytest.raises(ValueError, match=r"train_seeds=\[0, 7\] asks for seeds that were not trained.*scopd seed 7"):
        run(compose_tables(results, "train_seeds=[0,7]"))
    assert not (results / "tiny" / "tables").exists()


def test_leaves_without_per_item_records_keep_their_scores_and_say_why(results: Path) -> None:
    predictions_path(leaf_dir(results, "tiny", "tiny", "base", "visionzip", 0.1), "syn_pope").unlink()
    run(compose_tables(results))
    out = results / "tiny" / "tables"
    row = read_csv(out / "main.csv")[("0.1", "Vanilla")]
    assert row["syn_pope lo"] == "" and row["syn_count lo"] != "" and row["Avg lo"] == ""
    md = (out / "main.md").read_text()
    assert (
        "No interval (no per-item predictions (syn_pope.predictions.jsonl)): Vanilla / visionzip / 10%: syn_pope" in md
    )
    assert np.isfinite(float(row["syn_pope"]))


def test_retain_plot_draws_each_interval_as_an_error_bar() -> None:
    series = {"SCOPD / visionzip": {0.2: 80.0, 0.1: 70.0}, "Vanilla / visionzip": {0.2: 75.0, 0.1: 60.0}}
    intervals = {"SCOPD / visionzip": {0.2: (72.0, 88.0), 0.1: (61.0, 79.0)}}
    ax = retain_figure(series, [0.2, 0.1], title="t", intervals=intervals).axes[0]
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    ends = sorted(tuple(np.round(seg[:, 1], 6)) for c in bars for seg in c.lines[2][0].get_segments())
    assert ends == [(61.0, 79.0), (72.0, 88.0)]  # one bar per point with an interval, spanning it


def test_average_retain_ratio_is_recomputed_on_every_resample(results: Path) -> None:
    """The Avg interval is the quantiles of, per resample r, mean_b 100 x score_r / full_r (both rows scored on
    resample r of benchmark b), rebuilt here from the bootstrap's primitives; not a ratio of intervals."""
    run(compose_tables(results))
    row = read_csv(results / "tiny" / "tables" / "main.csv")[("0.1", "Vanilla")]
    scorer = {"syn_count": "number_match", "syn_pope": "pope"}
    ratios = []
    for bench in BENCHES:
        rows = {}
        for budget in (1.0, 0.1):
            items = [
                ScoredItem(
                    str(it.index),
                    it.answer
                    if it.index in RIGHT[("base", budget)]
                    else ("99" if bench == "syn_count" else {"yes": "no", "no": "yes"}[it.answer]),
                    it.answer,
                    subset=it.subset,
                )
                for it in bench_items(bench)
            ]
            lay = layout(scorer[bench], items, HEADLINE.get(bench))
            rows[budget] = replicates(lay, items, draw_counts(lay, 1000, stream(0, "items", bench)))
        ratios.append(100.0 * rows[0.1] / rows[1.0])
    lo, hi = interval(np.mean(ratios, axis=0), 0.95)
    assert (row["Avg lo"], row["Avg hi"]) == (f"{lo:.2f}", f"{hi:.2f}")
    per_bench = [(float(row[f"{b} lo"]), float(row[f"{b} hi"])) for b in BENCHES]
    naive = np.mean(
        [
            100.0 * lo_b / float(read_csv(results / "tiny" / "tables" / "main.csv")[("1", "Vanilla")][b])
            for (lo_b, _), b in zip(per_bench, BENCHES, strict=True)
        ]
    )
    assert abs(naive - lo) > 0.5  # the ratio of the bounds is a different (wrong) number
