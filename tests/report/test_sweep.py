"""``make_tables`` on a sweep block (SCOPD Fig. 3): its table's normalised means and intervals, and its plot.

A fake results tree (``test_intervals``' leaves: per-item records over small benchmark files) for a ρ sweep of
three points, one of which has no result. The means and their intervals are recomputed here from the scorers
and the bootstrap's primitives.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from matplotlib.container import ErrorbarContainer
from omegaconf import DictConfig, OmegaConf

from sparsectx import workflow as wf
from sparsectx.data.tsv import write_tsv
from sparsectx.eval.scorers import ScoredItem, score_items
from sparsectx.report.bootstrap import draw_counts, interval, layout, replicates, stream
from sparsectx.report.plots import sweep_figure
from sparsectx.report.study import run

from .test_intervals import BENCHES, HEADLINE, bench_items, write_leaf

LABEL = "ρ (positions distilled)"
POINTS = [(0.1, "scopd_plus"), (0.3, "scopd_plus_rho_0_3"), (0.5, "scopd_plus_rho_0_5")]
RIGHT = {  # (method, budget) -> items answered right; scopd_plus_rho_0_5 has no result
    ("base", 1.0): set(range(0, 24)),
    ("scopd_plus", 1.0): set(range(0, 26)),
    ("base", 0.1): set(range(0, 15)),
    ("scopd_plus", 0.1): set(range(0, 18)),
    ("scopd_plus_rho_0_3", 0.1): set(range(0, 20)),
}
SCORER = {"syn_count": "number_match", "syn_pope": "pope"}


def sweep_grid(reference: str) -> dict:
    """Returns the grid keys of a ρ sweep normalised to ``reference`` at 100%."""
    variant = {"preset": "scopd_plus", "pruner": "visionzip", "budgets": [0.1]}
    sweep = {
        "kind": "sweep",
        "models": ["tiny"],
        "benchmarks": BENCHES,
        "pruner": "visionzip",
        "budget": 0.1,
        "reference": reference,
        "parameter": {"key": "method.positions.fraction", "label": LABEL, "percent": True},
        "points": [{"value": v, "method": m} for v, m in POINTS],
    }
    return {
        "pruners": {"visionzip": {}},
        "benchmarks": {b: {} for b in BENCHES},
        "methods": {
            "scopd_plus": {"pruner": "visionzip", "budgets": [0.1]},
            "scopd_plus_rho_0_3": {**variant, "overrides": ["method.positions.fraction=0.3"]},
            "scopd_plus_rho_0_5": {**variant, "overrides": ["method.positions.fraction=0.5"]},
        },
        "tables": {"rho": sweep},
        "passk": None,
        "efficiency": None,
    }


def compose_tables(root: Path, grid: dict) -> DictConfig:
    """Returns ``conf/make_tables.yaml`` for the tiny preset under ``root``, its grid keys replaced by ``grid``."""
    with initialize_config_dir(version_base=None, config_dir=str(wf.CONF_DIR)):
        cfg = compose("make_tables", overrides=["experiment=tiny", f"results_root={root}", "logger=none"])
    for key, value in grid.items():
        OmegaConf.update(cfg, f"grid.{key}", value, merge=False)
    return cfg


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Returns a results root with every leaf of ``RIGHT`` (benchmark files under ``tmp_path/data``)."""
    data = tmp_path / "data"
    data.mkdir()
    for bench in BENCHES:
        write_tsv(data / f"{bench}.tsv", bench_items(bench))
    for (method, budget), right in RIGHT.items():
        for bench in BENCHES:
            write_leaf(tmp_path / "results", data, method, budget, bench, right)
    return tmp_path / "results"


def scored(bench: str, right: set[int]) -> list[ScoredItem]:
    """Returns the scored items of a row answering ``right`` correctly (as ``write_leaf`` answers)."""
    wrong = {"syn_count": lambda a: "99", "syn_pope": lambda a: {"yes": "no", "no": "yes"}[a]}[bench]
    return [
        ScoredItem(str(it.index), it.answer if it.index in right else wrong(it.answer), it.answer, subset=it.subset)
        for it in bench_items(bench)
    ]


def expected(method: str, reference: str) -> tuple[float, float, float]:
    """Returns (mean, lo, hi): mean_b 100 x score / reference score, and its interval over paired resamples."""
    means, ratios = [], []
    for bench in BENCHES:
        mine, full = scored(bench, RIGHT[(method, 0.1)]), scored(bench, RIGHT[(reference, 1.0)])
        headline = HEADLINE.get(bench)
        means.append(
            100.0
            * score_items(SCORER[bench], mine, headline).metrics["score"]
            / score_items(SCORER[bench], full, headline).metrics["score"]
        )
        lay = layout(SCORER[bench], mine, headline)
        counts = draw_counts(lay, 1000, stream(0, "items", bench))
        ratios.append(
            100.0 * replicates(lay, mine, counts) / replicates(layout(SCORER[bench], full, headline), full, counts)
        )
    lo, hi = interval(np.mean(ratios, axis=0), 0.95)
    return float(np.mean(means)), lo, hi


def sweep_rows(root: Path) -> dict[str, dict[str, str]]:
    """Returns the rows of ``rho.sweep.csv`` keyed by the parameter's shown value."""
    text = (root / "tiny" / "tables" / "rho.sweep.csv").read_text()
    return {row[LABEL]: row for row in csv.DictReader(io.StringIO(text))}


@pytest.mark.parametrize("reference", ["base", "scopd_plus"])
def test_each_point_is_its_normalised_mean_with_its_paired_interval(results: Path, reference: str) -> None:
    written = run(compose_tables(results, sweep_grid(reference)))
    rows = sweep_rows(results)
    assert list(rows) == ["10%", "30%", "50%"]
    labels = {"scopd_plus": "SCOPD+", "scopd_plus_rho_0_3": "SCOPD+ ρ = 30%"}  # conf/make_tables.yaml method_labels
    for shown, method in (("10%", "scopd_plus"), ("30%", "scopd_plus_rho_0_3")):
        mean, lo, hi = expected(method, reference)
        row = rows[shown]
        shown_row = (row["model"], row["method"], row["pruner"], row["budget"])
        assert shown_row == ("tiny", labels[method], "visionzip", "0.1")
        assert (row["Avg"], row["Avg lo"], row["Avg hi"]) == (f"{mean:.2f}", f"{lo:.2f}", f"{hi:.2f}")
    assert rows["50%"]["Avg"] == "—" and "no result record" in rows["50%"]["notes"]
    tables = results / "tiny" / "tables"
    markdown = (tables / "rho.sweep.md").read_text()
    untrained, ulo, uhi = expected("base", reference)
    assert f"Untrained Vanilla / visionzip / 10%: {untrained:.2f} [{ulo:.2f}, {uhi:.2f}]" in markdown
    assert "\\begin{tabular}" in (tables / "rho.sweep.tex").read_text()
    for name in ("rho.sweep.md", "rho.sweep.tex", "rho.sweep.csv", "sweep_rho_tiny.png", "sweep_rho_tiny.svg"):
        assert tables / name in written, name
    assert (tables / "sweep_rho_tiny.svg").read_text().lstrip().startswith("<?xml")
    caption = (tables / "sweep_rho_tiny.caption.md").read_text()
    assert "not drawn: 50% (scopd_plus_rho_0_5): syn_count: no result record" in caption
    assert "[svg](sweep_rho_tiny.svg)" in (tables / "README.md").read_text()


def test_the_reference_changes_every_value(results: Path) -> None:
    """Normalising to the trained model at 100% is not the same number as normalising to the untrained one."""
    assert abs(expected("scopd_plus", "base")[0] - expected("scopd_plus", "scopd_plus")[0]) > 1.0
    run(compose_tables(results, sweep_grid("scopd_plus")))
    assert sweep_rows(results)["10%"]["Avg"] == f"{expected('scopd_plus', 'scopd_plus')[0]:.2f}"


def test_the_sweep_plot_draws_measured_points_intervals_and_both_references() -> None:
    points, bars = {0.1: 90.0, 0.3: 85.0}, {0.1: (88.0, 92.0)}
    figure = sweep_figure(
        points,
        [0.05, 0.1, 0.3],
        title="t",
        x_label=LABEL,
        percent=True,
        series="trained",
        reference="full",
        baseline=("untrained", 80.0),
        intervals=bars,
    )
    ax = figure.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["trained"].get_xdata()) == [10.0, 30.0]  # 5% has no value: no marker, no segment to it
    assert list(lines["full"].get_ydata()) == [100.0, 100.0] and list(lines["untrained"].get_ydata()) == [80.0, 80.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["5%", "10%", "30%"]
    (bar,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert [tuple(seg[:, 1]) for seg in bar.lines[2][0].get_segments()] == [(88.0, 92.0)]


def test_an_svg_is_the_same_bytes_from_two_processes(tmp_path: Path) -> None:
    """matplotlib salts an SVG's path ids per process: the same figure written by a local run and by a cluster
    job must still be byte-identical (``plots.SVG_HASH_SALT``)."""
    import subprocess
    import sys

    script = (
        "import sys; from sparsectx.report.plots import plot_sweep; "
        "plot_sweep({0.05: 40.0, 0.1: 45.0, 0.2: 50.0}, [0.05, 0.1, 0.2], sys.argv[1], title='rho', "
        "x_label='rho', percent=False, series='SCOPD+', reference='full', benchmarks=['syn_count'])"
    )
    for process in ("a", "b"):
        subprocess.run([sys.executable, "-c", script, str(tmp_path / process / "sweep.png")], check=True)
    first, second = ((tmp_path / process / "sweep.svg").read_bytes() for process in ("a", "b"))
    assert b"<use xlink:href=" in first and first == second
