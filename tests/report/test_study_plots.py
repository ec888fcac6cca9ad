"""``make_tables``' plots as a reader of the papers expects them: retain ratio against prefill FLOPs and KV cache
(LT-OPD Fig. 1 right), compression-gap recovery against budget, retain ratio against budget and Pass@K, each a
PNG with an SVG twin and a caption, the same bytes from any process.

The results are written with the real writers (``BenchResult`` JSONs, ``passk_fakes``' Pass@K leaves, and
``efficiency.json`` rows whose ratios ``sparsectx.eval.efficiency.with_ratios`` computes); every plotted point
is read back from the SVG (``svg_points``) and compared with the number computed here from those inputs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sparsectx import workflow as wf
from sparsectx.eval.efficiency import efficiency_path, with_ratios
from sparsectx.eval.passk_mode import passk_path
from sparsectx.eval.results import write_json
from sparsectx.paths import leaf_dir
from sparsectx.report.study import run

from .svg_points import SVG, panels, parse
from .test_study import compose_tables, png_size, write_passk, write_result

BENCHES = ["syn_count", "syn_ocr"]
BUDGETS = [0.2, 0.1, 0.05]
GRID = {
    "pruners": {"visionzip": {}, "cdpruner": {}},
    "benchmarks": {"syn_count": {}, "syn_ocr": {}},
    "methods": {"scopd": {"pruner": "visionzip", "budgets": BUDGETS}},
    "tables": {
        "main": {
            "models": ["tiny"],
            "benchmarks": BENCHES,
            "rows": [
                {"methods": ["base", "scopd"], "pruners": ["visionzip"], "budgets": BUDGETS},
                {"methods": ["base"], "pruners": ["cdpruner"], "budgets": BUDGETS},
            ],
        },
    },
    "passk": {
        "models": ["tiny"],
        "benchmarks": ["syn_count"],
        "rows": [{"methods": ["base"], "pruners": ["visionzip"], "budgets": [0.1]}],
    },
    "efficiency": {
        "models": ["tiny"],
        "benchmarks": ["syn_ocr"],
        "rows": [
            {"methods": ["base"], "pruners": ["visionzip", "cdpruner"], "budgets": BUDGETS},
            {"methods": ["scopd"], "pruners": ["visionzip"], "budgets": [0.1]},
        ],
    },
}
SCORES = {  # (method, pruner, budget) -> (syn_count, syn_ocr); base/cdpruner/0.05 has no syn_ocr result
    ("base", "visionzip", 1.0): (50.0, 40.0),
    ("base", "visionzip", 0.2): (40.0, 36.0),
    ("base", "visionzip", 0.1): (30.0, 20.0),
    ("base", "visionzip", 0.05): (20.0, 12.0),
    ("scopd", "visionzip", 0.2): (45.0, 39.0),
    ("scopd", "visionzip", 0.1): (40.0, 30.0),
    ("scopd", "visionzip", 0.05): (35.0, 22.0),
    ("base", "cdpruner", 0.2): (42.0, 34.0),
    ("base", "cdpruner", 0.1): (36.0, 28.0),
    ("base", "cdpruner", 0.05): (30.0, None),
}
COSTS = {  # (method, pruner) -> budget -> (prefill FLOPs, KV-cache bytes): what budget_row would measure
    ("base", "visionzip"): {1.0: (1000.0, 800.0), 0.2: (300.0, 240.0), 0.1: (200.0, 160.0), 0.05: (150.0, 120.0)},
    ("base", "cdpruner"): {1.0: (1000.0, 800.0), 0.2: (310.0, 240.0), 0.1: (210.0, 160.0), 0.05: (160.0, 120.0)},
    ("scopd", "visionzip"): {1.0: (1000.0, 800.0), 0.1: (200.0, 160.0)},
}
LABELS = {
    ("base", "visionzip"): "Vanilla / visionzip",
    ("scopd", "visionzip"): "SCOPD / visionzip",
    ("base", "cdpruner"): "Vanilla / cdpruner",
}
PLOTS = [
    "retain_main_tiny",
    "recovery_vs_budget_main_tiny",
    "retain_vs_cost_main_tiny",
    "passk_tiny_syn_count_base_visionzip_0.1",
]


def retain(method: str, pruner: str, budget: float) -> float:
    """Returns the average retain ratio (%) of a row: the mean of score / full-context score over ``BENCHES``."""
    full = SCORES[("base", "visionzip", 1.0)]
    return sum(100 * s / f for s, f in zip(SCORES[(method, pruner, budget)], full, strict=True)) / len(full)


def recovery(budget: float) -> float:
    """Returns SCOPD's mean compression-gap recovery (%) at ``budget``: 100 (trained - untrained) / (full -
    untrained) per benchmark, averaged."""
    full, trained, untrained = (
        SCORES[(m, "visionzip", b)] for m, b in (("base", 1.0), ("scopd", budget), ("base", budget))
    )
    parts = [100 * (t - u) / (f - u) for f, t, u in zip(full, trained, untrained, strict=True)]
    return sum(parts) / len(parts)


def write_efficiency(root: Path, method: str, pruner: str) -> None:
    """Writes the ``efficiency.json`` of (method, pruner): raw rows of ``COSTS``, ratios by ``with_ratios``."""
    rows = []
    for budget, (prefill, kv) in COSTS[(method, pruner)].items():
        latency = {"vision": 1.0, "selection": 0.1, "prefill": prefill / 100, "decode": 5.0}
        latency["total"] = sum(latency.values())
        rows.append(
            {
                "budget": budget,
                "kept_visual": 64.0 * budget,
                "prefill_len": 40.0,
                "flops": {"prefill": prefill, "total": prefill + 500.0},
                "kv_cache_bytes": kv,
                "latency_ms": latency,
            }
        )
    reference = rows[0]
    payload = {"method": method, "pruner": pruner, "budgets": [with_ratios(row, reference) for row in rows]}
    write_json(efficiency_path(root, "tiny", "tiny", method, pruner), payload)


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """Returns a results root holding every leaf of ``GRID``: scores, Pass@K at 10% and 100%, efficiency."""
    for (method, pruner, budget), scores in SCORES.items():
        for bench, score in zip(BENCHES, scores, strict=True):
            if score is not None:
                write_result(tmp_path, method, pruner, budget, bench, score)
    write_passk(tmp_path, 0.1, [True] * 4 + [False] * 4, [2, 2, 2, 2, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0])
    write_passk(tmp_path, 1.0, [True] * 8, [4, 4, 4, 3, 4, 3, 4, 4], [1] + [0] * 7)
    for method, pruner in COSTS:
        write_efficiency(tmp_path, method, pruner)
    return tmp_path


def tables(root: Path) -> Path:
    return root / "tiny" / "tables"


def assert_points(found: dict[str, list[tuple[float, float]]], expected: dict[str, list[tuple[float, float]]]):
    """Asserts that every series holds exactly the expected points (any order), to 0.01 of the data unit."""
    assert set(found) == set(expected)
    for label, points in expected.items():
        flat = [value for point in sorted(found[label]) for value in point]
        assert flat == pytest.approx([value for point in sorted(points) for value in point], abs=0.01), label


def test_every_plot_is_a_png_with_a_well_formed_svg_twin_and_a_caption(study: Path) -> None:
    paths = run(compose_tables(study, grid=GRID))
    out = tables(study)
    readme = (out / "README.md").read_text()
    assert {p.stem for p in out.glob("*.png")} == set(PLOTS)
    for name in PLOTS:
        width, height = png_size(out / f"{name}.png")
        assert width > 100 and height > 100
        svg = parse(out / f"{name}.svg")
        assert svg.get("width").endswith("pt") and svg.find(f"{SVG}g") is not None
        caption = (out / f"{name}.caption.md").read_text()
        assert caption.startswith("# ") and "Notes" in caption
        assert {out / f"{name}.{ext}" for ext in ("png", "svg", "caption.md")} <= set(paths)
        assert f"[{name}.png]({name}.png), [caption]({name}.caption.md), [svg]({name}.svg)" in readme


def test_retain_against_prefill_flops_and_kv_cache_joins_efficiency_and_scores(study: Path) -> None:
    run(compose_tables(study, grid=GRID))
    prefill_panel, kv_panel = panels(tables(study) / "retain_vs_cost_main_tiny.svg")
    measured = [(m, p, b) for (m, p), by_budget in COSTS.items() for b in by_budget if b < 1.0]
    drawn = [key for key in measured if None not in SCORES[key]]
    for panel, which in ((prefill_panel, 0), (kv_panel, 1)):
        expected: dict[str, list[tuple[float, float]]] = {}
        for method, pruner, budget in drawn:
            ratio = COSTS[(method, pruner)][budget][which] / COSTS[(method, pruner)][1.0][which]
            expected.setdefault(LABELS[(method, pruner)], []).append((100 * ratio, retain(method, pruner, budget)))
        assert_points(panel.series, expected)
    caption = (tables(study) / "retain_vs_cost_main_tiny.caption.md").read_text()
    assert "- not drawn: Vanilla / cdpruner / 5%: retain ratio: the average needs a score on every benchmark" in (
        caption
    )
    assert "prefill FLOPs" in caption and "KV cache" in caption and "efficiency.json" in caption


def test_a_point_without_its_efficiency_file_is_not_drawn_and_named(study: Path) -> None:
    efficiency_path(study, "tiny", "tiny", "scopd", "visionzip").unlink()
    run(compose_tables(study, grid=GRID))
    prefill_panel, _ = panels(tables(study) / "retain_vs_cost_main_tiny.svg")
    assert "SCOPD / visionzip" not in prefill_panel.series and "Vanilla / visionzip" in prefill_panel.series
    caption = (tables(study) / "retain_vs_cost_main_tiny.caption.md").read_text()
    assert "- not drawn: SCOPD / visionzip / 10%: prefill FLOPs and KV cache: no result record" in caption


def test_recovery_against_budget_is_the_recovery_tables_mean(study: Path) -> None:
    run(compose_tables(study, grid=GRID))
    (panel,) = panels(tables(study) / "recovery_vs_budget_main_tiny.svg", log_x=True)
    assert_points(panel.series, {"SCOPD / visionzip": [(100 * b, recovery(b)) for b in BUDGETS]})
    assert recovery(0.05) == pytest.approx(100 * (15 / 30 + 10 / 28) / 2)  # the fixture's own arithmetic
    caption = (tables(study) / "recovery_vs_budget_main_tiny.caption.md").read_text()
    assert "main.recovery.md" in caption


def test_retain_and_passk_svgs_hold_the_numbers_of_their_tables(study: Path) -> None:
    run(compose_tables(study, grid=GRID))
    (panel,) = panels(tables(study) / "retain_main_tiny.svg", log_x=True)
    expected = {
        label: [(100 * b, retain(m, p, b)) for b in BUDGETS if None not in SCORES[(m, p, b)]]
        for (m, p), label in LABELS.items()
    }
    assert_points(panel.series, expected)
    leaf = leaf_dir(study, "tiny", "tiny", "base", "visionzip", 0.1)
    payload = json.loads(passk_path(leaf, "syn_count").read_text())
    (panel,) = panels(tables(study) / "passk_tiny_syn_count_base_visionzip_0.1.svg", log_x=True)
    curves = {"Vanilla / visionzip / 10%": payload["sparse"], "no image (control)": payload["no_image"]}
    assert_points(panel.series, {k: [(int(n), v) for n, v in c["pass_at_k"].items()] for k, c in curves.items()})


def test_a_moved_marker_reads_back_as_another_value(study: Path, tmp_path: Path) -> None:
    """The read-back sees the SVG's own coordinates: a marker moved by 10 points is another value."""
    run(compose_tables(study, grid=GRID))
    text = (tables(study) / "recovery_vs_budget_main_tiny.svg").read_text()
    start = text.index('<g id="series-')
    head, use, tail = text[:start], text[start:].split("<use ", 1)[0], text[start:].split("<use ", 1)[1]
    y = tail.split('y="', 1)[1].split('"', 1)[0]
    moved = tmp_path / "moved.svg"
    moved.write_text(head + use + "<use " + tail.replace(f'y="{y}"', f'y="{float(y) - 10:.6f}"', 1))
    (panel,) = panels(moved, log_x=True)
    with pytest.raises(AssertionError):
        assert_points(panel.series, {"SCOPD / visionzip": [(100 * b, recovery(b)) for b in BUDGETS]})


def test_the_tables_folder_is_the_same_bytes_from_another_process(study: Path) -> None:
    """The study compares tables folders byte for byte (``make slurm-demo``): every plot, SVG included, must be
    the same bytes when written by another process."""
    grid_file = study / "grid.yaml"
    grid_file.write_text(yaml.safe_dump({"grid": GRID}))
    run(compose_tables(study, f"grid_files=[{grid_file}]", grid=None))

    def files() -> dict[str, bytes]:
        found = tables(study).rglob("*")
        return {
            str(p.relative_to(tables(study))): p.read_bytes()
            for p in found
            if p.is_file() and ".hydra" not in p.parts and p.suffix != ".log"
        }

    first = files()
    shutil.rmtree(tables(study))
    cmd = [
        sys.executable,
        "src/make_tables.py",
        "experiment=tiny",
        f"results_root={study}",
        "logger=none",
        f"grid_files=[{grid_file}]",
    ]
    done = subprocess.run(cmd, cwd=wf.REPO_DIR, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    second = files()
    assert {f"{name}.svg" for name in PLOTS} <= set(first)
    assert set(first) == set(second)
    assert [name for name in first if first[name] != second[name]] == []
