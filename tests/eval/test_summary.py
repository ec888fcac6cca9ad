"""``src/evaluate.py`` prints a score summary per benchmark and writes its progress to its log (issue 14, item 7)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparsectx.eval.runner import format_summary, run

from .test_runner_support import SIDE, base_overrides, build_model_dir, compose_eval, write_bench

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("model"), "qwen2_5_vl", weights=True)


def test_the_summary_names_benchmark_metric_score_counts_and_path(model_dir: Path, tmp_path: Path) -> None:
    benches = {b: write_bench(tmp_path / f"{b}.tsv", b, 3, SIDE) for b in ("syn_count", "syn_pope")}
    overrides = ["bench=synthetic", *base_overrides(model_dir, tmp_path / "results", benches, 4)]
    overrides += [f"~bench.{b}" for b in ("syn_detail", "syn_spatial", "syn_ocr", "syn_mcq")]
    paths = run(compose_eval([*overrides, "budget=0.25"]))
    header, *lines = format_summary(paths).splitlines()
    assert header.split()[:4] == ["benchmark", "metric", "score", "items"]
    assert [line.split()[:2] for line in lines] == [["syn_count", "number_match"], ["syn_pope", "pope"]]
    for line, path in zip(lines, paths, strict=True):
        assert "3 scored / 0 skipped" in line and line.endswith(str(path))
        float(line.split()[2])  # the score


def test_evaluate_py_prints_the_summary_and_logs_progress_to_its_log_file(model_dir: Path, tmp_path: Path) -> None:
    tsv = write_bench(tmp_path / "syn_count.tsv", "syn_count", 2, SIDE)
    args = [
        *base_overrides(model_dir, tmp_path / "results", {"syn_count": tsv}, 4),
        "bench=syn_count",
        "budget=0.5",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "src" / "evaluate.py"), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    leaf = tmp_path / "results" / "dev" / "tiny" / "base" / "visionzip" / "0.5"
    summary = "syn_count        number_match"
    assert summary in done.stdout and str(leaf / "syn_count.json") in done.stdout
    log = (leaf / "evaluate.log").read_text()
    assert "syn_count: 2 items" in log and "2/2 items generated" in log  # progress
    assert "score summary" in log and summary in log and "2 scored / 0 skipped" in log
