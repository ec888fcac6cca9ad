"""``make_tables`` on the grid's ``report:`` entries (SCOPD Table 9 and Fig. 7, LT-OPD Fig. 1 and Fig. 4, the
examples page), from small synthetic files; every number is recomputed here from the files written.

The results tree is ``test_intervals``' (SCOPD trained at 10%, two benchmarks of 30 items); its predictions
files get the fields the greedy evaluation writes (token counts, responses), and the trained run a per-step log.
"""

from __future__ import annotations

import csv
import io
import json
import random
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from sparsectx import workflow as wf
from sparsectx.data.tsv import write_tsv
from sparsectx.eval.efficiency import efficiency_path
from sparsectx.eval.results import write_rows
from sparsectx.io import read_jsonl
from sparsectx.paths import leaf_dir, predictions_path, result_path, run_dir, step_log_path
from sparsectx.report.blocks import recovery_table
from sparsectx.report.collect import collect_results
from sparsectx.report.paper_figures import recovery_bars
from sparsectx.report.study import load_study_grid, load_tables_config, run
from sparsectx.report.training_report import windows

from .test_intervals import BENCHES, GRID, RIGHT, bench_items, write_leaf

STEPS = 5
WINDOW = 2


def step_records() -> list[dict]:
    """Returns five steps of a fake on-policy run: rates move by step, one step without a correct rollout."""
    rows = []
    for step in range(1, STEPS + 1):
        row = {
            "step": step,
            "perf/samples_per_s": 2.0 * step,
            "perf/peak_memory_gb": 1.0 + 0.1 * (step % 3),
            "rollout/accuracy": 0.1 * step,
            "rollout/pass_at_group": 0.2 * step,
            "rollout/groups_all_correct": 0.05,
            "rollout/groups_mixed": 0.1 * step,
            "rollout/groups_all_wrong": 0.95 - 0.1 * step,
            "rollout/length": 10.0 + step,
            "rollout/length_wrong": 12.0 + step,
            "rollout/format_rate": 0.5,
            "rollout/stop_rate": 1.0 - 0.01 * step,
            "train/divergence": 1.0 / step,
        }
        if step != 3:  # no correct rollout at step 3: the key is absent, as the trainer logs it
            row["rollout/length_correct"] = 8.0 + step
        rows.append(row)
    return rows


def tokens_of(method: str, budget: float, index: int) -> int:
    """Returns the fake generated-token count of one item of one cell."""
    return 3 + (index % 4) + (2 if method == "scopd" else 0) + (1 if budget == 1.0 else 0)


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """Returns the folder holding ``results/`` (leaves with full prediction rows) and ``runs/`` (one step log)."""
    data = tmp_path / "data"
    data.mkdir()
    for bench in BENCHES:
        write_tsv(data / f"{bench}.tsv", bench_items(bench))
    for (method, budget), right in RIGHT.items():
        for bench in BENCHES:
            write_leaf(tmp_path / "results", data, method, budget, bench, right)
            path = predictions_path(leaf_dir(tmp_path / "results", "tiny", "tiny", method, "visionzip", budget), bench)
            rows = [
                {
                    **row,
                    "num_tokens": tokens_of(method, budget, i),
                    "status": "tagged",
                    "stopped": True,
                    "correct": i in right,
                    "output": f"<think>t{i}\rline</think><answer>{row['answer']}</answer>",
                }
                for i, row in enumerate(read_jsonl(path))
            ]
            rows[-1]["status"] = "error"  # a failed generation: left out of the mean
            write_rows(path, rows)
    log = step_log_path(run_dir(tmp_path / "runs", "tiny", "tiny", "scopd", "visionzip", 0.1))
    log.parent.mkdir(parents=True)
    log.write_text("".join(json.dumps(r) + "\n" for r in step_records()))
    return tmp_path


REPORT = {
    "cost": {"kind": "training_cost", "methods": ["scopd"], "blocks": ["main"]},
    "dynamics": {"kind": "training_dynamics", "methods": ["scopd"], "window": WINDOW},
    "deviation": {"kind": "deviation", "methods": ["scopd"], "window": WINDOW},
    "recovery": {"kind": "recovery_figure", "blocks": ["main"]},
    "examples": {"kind": "examples", "blocks": ["main"], "items": 3},
}


def compose_tables(root: Path, grid: dict) -> DictConfig:
    """Returns ``conf/make_tables.yaml`` for the tiny preset under ``root``, its grid keys replaced by ``grid``."""
    with initialize_config_dir(version_base=None, config_dir=str(wf.CONF_DIR)):
        cfg = compose(
            "make_tables",
            overrides=[
                "experiment=tiny",
                f"results_root={root / 'results'}",
                f"runs_root={root / 'runs'}",
                "logger=none",
                "bootstrap.resamples=50",
            ],
        )
    for key, value in grid.items():
        OmegaConf.update(cfg, f"grid.{key}", value, merge=False, force_add=True)
    return cfg


def read_csv(path: Path) -> list[dict[str, str]]:
    """Returns the rows of a CSV file."""
    return list(csv.DictReader(io.StringIO(path.read_text())))


def test_training_cost_and_output_tokens(study: Path) -> None:
    run(compose_tables(study, {**GRID, "report": {"cost": REPORT["cost"]}}))
    out = study / "results" / "tiny" / "tables"
    (row,) = read_csv(out / "cost.csv")
    records = step_records()
    assert float(row["time / sample (s)"]) == pytest.approx(
        sum(1 / r["perf/samples_per_s"] for r in records) / 5, abs=5e-3
    )
    assert float(row["peak memory (GB)"]) == pytest.approx(1.2, abs=5e-3)
    assert (row["method"], row["steps"], row["note"]) == ("SCOPD", "5", "")
    tokens = {(r["method"], r["budget"]): r for r in read_csv(out / "cost.tokens.csv")}
    assert set(tokens) == {(m, b) for m in ("Vanilla", "SCOPD") for b in ("1", "0.1")}
    for (method, budget), shown in tokens.items():
        key = "base" if method == "Vanilla" else "scopd"
        counts = [tokens_of(key, float(budget), i) for _ in BENCHES for i in range(29)]  # the 30th failed
        assert float(shown["mean output tokens"]) == pytest.approx(sum(counts) / len(counts), abs=5e-3)
        assert shown["items"] == str(len(counts))
    assert "TFLOPs" in (out / "cost.md").read_text()
    assert "\\begin{tabular}" in (out / "cost.tex").read_text()


def test_a_run_without_its_step_log_is_a_row_that_says_so(study: Path) -> None:
    step_log_path(run_dir(study / "runs", "tiny", "tiny", "scopd", "visionzip", 0.1)).unlink()
    run(compose_tables(study, {**GRID, "report": {"cost": REPORT["cost"]}}))
    (row,) = read_csv(study / "results" / "tiny" / "tables" / "cost.csv")
    assert row["time / sample (s)"] == "—" and "steps.jsonl" in row["note"]


def test_training_dynamics_windows_and_figures(study: Path) -> None:
    report = {k: REPORT[k] for k in ("dynamics", "deviation")}
    paths = run(compose_tables(study, {**GRID, "report": report}))
    out = study / "results" / "tiny" / "tables"
    rows = read_csv(out / "dynamics.csv")
    records = step_records()
    assert [r["steps"] for r in rows] == ["1-2", "3-4", "5-5"]
    for row, start in zip(rows, (0, 2, 4), strict=True):
        part = records[start : start + WINDOW]
        assert float(row["accuracy"]) == pytest.approx(100 * sum(r["rollout/accuracy"] for r in part) / len(part))
        truncated = sum(1 - r["rollout/stop_rate"] for r in part) / len(part)
        assert float(row["truncated"]) == pytest.approx(100 * truncated, abs=5e-3)
        correct = [r["rollout/length_correct"] for r in part if "rollout/length_correct" in r]
        assert float(row["correct"]) == pytest.approx(sum(correct) / len(correct))  # step 3 has none: not a 0
    (deviation,) = read_csv(out / "deviation.csv")[:1]
    assert float(deviation["divergence"]) == pytest.approx((1.0 + 0.5) / 2, abs=5e-3)
    for name in ("dynamics_tiny_scopd_visionzip_0.1", "deviation_tiny"):
        for suffix in (".png", ".svg", ".caption.md"):
            assert out / f"{name}{suffix}" in paths


def test_windows_skip_absent_keys() -> None:
    rows = windows([{"step": 1, "a": 1.0}, {"step": 2}, {"step": 3, "a": 3.0}], ["a"], 2)
    assert rows == [{"first": 1, "last": 2, "a": 1.0}, {"first": 3, "last": 3, "a": 3.0}]


def test_recovery_figure_bars_are_the_recovery_of_each_benchmark(study: Path) -> None:
    cfg = compose_tables(study, {**GRID, "report": {"recovery": REPORT["recovery"]}})
    paths = run(cfg)
    tc = load_tables_config(cfg)
    grid = load_study_grid(tc)
    entries = collect_results(grid, tc.results_root)
    (bars,) = recovery_bars(recovery_table(grid, grid.blocks[0], "tiny", entries, tc.method_labels, 2)).values()
    expected = []
    for bench in BENCHES:
        score = {
            key: json.loads(result_path(leaf_dir(study / "results", "tiny", "tiny", *key), bench).read_text())["score"]
            for key in (("scopd", "visionzip", 0.1), ("base", "visionzip", 0.1), ("base", "visionzip", 1.0))
        }
        trained, pruned, full = score.values()
        expected.append(100 * (trained - pruned) / (full - pruned))
    assert bars[:2] == pytest.approx(expected)
    assert bars[2] == pytest.approx(sum(expected) / 2)
    out = study / "results" / "tiny" / "tables"
    assert {out / "recovery_tiny.png", out / "recovery_tiny.svg"} <= set(paths)


def test_examples_page_draws_items_with_the_grid_seed(study: Path) -> None:
    started = time.perf_counter()
    run(compose_tables(study, {**GRID, "report": {"examples": REPORT["examples"]}}))
    assert time.perf_counter() - started < 60
    out = study / "results" / "tiny" / "tables"
    page = (out / "examples.md").read_text()
    rows = read_csv(out / "examples.csv")
    for bench in BENCHES:
        ids = random.Random(f"0/tiny/{bench}").sample(sorted(str(i) for i in range(30)), 3)
        assert [r["item"] for r in rows if r["benchmark"] == bench][::4] == ids  # four rows (cells) per item
        for sid in ids:
            assert (out / "examples_images" / f"tiny_{bench}_{sid}.png").is_file()
            assert f"examples_images/tiny_{bench}_{sid}.png" in page
    shown = [r for r in rows if r["benchmark"] == "syn_pope" and r["item"] == ids[0]]
    right = {(m, b): r for (m, b), r in RIGHT.items()}
    for row in shown:
        key = ("base" if row["method"] == "Vanilla" else "scopd", float(row["budget"]))
        assert row["correct"] == str(int(ids[0]) in right[key])
    assert f"**Question:** q{ids[0]}" in page and "**Reference:**" in page
    # a carriage return inside a response (random or OCR text) stays inside its quoted cell: the row still parses
    responses = [r["response"] for r in rows if r["response"]]
    assert responses and all(r.startswith("<think>t") and "\nline</think>" in r for r in responses)


def flops_grid() -> dict:
    """Returns ``GRID`` with an efficiency block (SCOPD at 10%, the untrained model at 10%) and Fig. 1 right."""
    efficiency = {
        "models": ["tiny"],
        "benchmarks": ["syn_count"],
        "rows": [{"methods": ["base", "scopd"], "pruners": ["visionzip"], "budgets": [0.1]}],
    }
    report = {"flops": {"kind": "flops_retain", "blocks": ["main"]}}
    return {**GRID, "efficiency": efficiency, "report": report}


def efficiency_row(budget: float, flops: float) -> dict:
    """Returns one budget's row of an efficiency.json (``sparsectx.eval.efficiency``)."""
    latency = {"prefill": flops, "decode": 1.0, "total": flops}
    ratios = {"prefill_flops": flops / 2, "total_flops": flops, "kv_cache": flops, "latency": latency}
    return {"budget": budget, "kept_visual": 10.0 * budget, "latency_ms": {"total": 5.0}, "ratios": ratios}


def score(study: Path, method: str, budget: float, bench: str) -> float:
    """Returns the recorded score of one leaf's benchmark."""
    path = result_path(leaf_dir(study / "results", "tiny", "tiny", method, "visionzip", budget), bench)
    return json.loads(path.read_text())["score"]


def test_flops_against_retain_ratio(study: Path) -> None:
    for method, flops in (("base", 0.3), ("scopd", 0.31)):
        path = efficiency_path(study / "results", "tiny", "tiny", method, "visionzip")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"budgets": [efficiency_row(1.0, 1.0), efficiency_row(0.1, flops)]}))
    paths = run(compose_tables(study, flops_grid()))
    out = study / "results" / "tiny" / "tables"
    rows = {r["method"]: r for r in read_csv(out / "flops.csv")}
    for method, label, flops in (("base", "Vanilla", 0.3), ("scopd", "SCOPD", 0.31)):
        ratios = [100 * score(study, method, 0.1, bench) / score(study, "base", 1.0, bench) for bench in BENCHES]
        assert float(rows[label]["avg retain ratio (%)"]) == pytest.approx(sum(ratios) / 2, abs=5e-3)
        assert float(rows[label]["total FLOPs (x unpruned)"]) == pytest.approx(flops)
        assert rows[label]["retain ratio from"] == "main"
    assert out / "flops_tiny.svg" in paths


def test_report_entries_are_checked_against_the_grid() -> None:
    grid = dict(GRID)
    with pytest.raises(ValueError, match=r"grid.report.x.methods names \['sft'\]"):
        load_tables_grid({**grid, "report": {"x": {"kind": "training_dynamics", "methods": ["sft"], "window": 2}}})
    with pytest.raises(ValueError, match=r"grid.report.x: kind 'examples' takes exactly \['blocks', 'items'\]"):
        load_tables_grid({**grid, "report": {"x": {"kind": "examples", "blocks": ["main"]}}})
    with pytest.raises(ValueError, match=r"grid.report.x.blocks names \['nope'\]"):
        load_tables_grid({**grid, "report": {"x": {"kind": "recovery_figure", "blocks": ["nope"]}}})
    with pytest.raises(ValueError, match=r"grid.efficiency has none"):
        load_tables_grid({**grid, "report": {"x": {"kind": "flops_retain", "blocks": ["main"]}}})


def load_tables_grid(keys: dict) -> wf.Grid:
    """Returns the checked grid of the tiny preset with ``keys`` replaced (the schema, then the cross-checks)."""
    return wf.load_grid("tiny", keys)
