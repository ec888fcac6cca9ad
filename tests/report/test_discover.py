"""``make_tables`` under a name of the user's (no preset, ``grid: null``) tables whatever was run there, and with
a preset says which hand runs lie outside its grid and how to render the blocks that have results (issue 41).

The results trees are written with the project's own writers: ``BenchResult`` through ``write_json`` (as
``evaluate.py`` writes a greedy result), ``passk_fakes.write_passk_leaf`` (the real Pass@K aggregation) and an
efficiency file whose ratios come from ``sparsectx.eval.efficiency.with_ratios``.
"""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest
from eval.test_runner_support import SIDE, base_overrides, build_model_dir, compose_eval, write_bench
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from sparsectx import workflow as wf
from sparsectx.eval.efficiency import efficiency_path, with_ratios
from sparsectx.eval.results import BenchResult, as_dict, write_json
from sparsectx.eval.runner import run as evaluate
from sparsectx.paths import leaf_dir, result_path
from sparsectx.report.study import NoResultsError, run

from .passk_fakes import write_passk_leaf
from .test_study import GRID, SCORES, compose_tables, write_result

NAME = "mine"
HAND = {  # (model, method, pruner, budget) -> {bench: score}: what a user ran by hand under experiment=mine
    ("tiny", "base", "visionzip", 1.0): {"syn_count": 50.0, "syn_ocr": 40.0},
    ("tiny", "base", "visionzip", 0.1): {"syn_count": 30.0, "syn_ocr": 20.0},
    ("tiny", "scopd_plus+seed1", "visionzip", 0.1): {"syn_count": 40.0},  # syn_ocr never evaluated
    ("tiny", "base", "cdpruner", 0.05): {"syn_count": 20.0, "syn_ocr": 10.0},
    ("tiny", "base", "cdpruner", 1.0): {"syn_count": 50.0},  # full context again, under another pruner
    ("tiny_video", "base", "visionzip", 1.0): {"syn_pope": 70.0},
}


def write_hand_result(root: Path, experiment: str, leaf: tuple[str, str, str, float], bench: str, score: float):
    """Writes one ``BenchResult`` JSON where ``python src/evaluate.py experiment=<experiment>`` would."""
    model, method, pruner, budget = leaf
    result = BenchResult(
        method=method,
        pruner=pruner,
        budget=budget,
        benchmark=bench,
        score=score,
        scorer_version=1,
        scorer="exact_match",
        extractor_version=1,
        metrics={"score": score},
        dataset_name=bench,
        experiment=experiment,
        seed=0,
        pruner_params={},
        model={"name": model},
        n_rows=12,
        n_scored=12,
        n_skipped=0,
        skipped=[],
        n_dropped=0,
        drop_rows=[],
        extraction={"tagged": 12},
        n_failed=0,
        n_truncated=0,
        mean_kept_visual=4.0,
        generation={},
        batch_size=4,
        resumed_rows=0,
        wall_time_s=1.0,
        provenance={"config_hash": "0" * 16},
    )
    write_json(result_path(leaf_dir(root, experiment, *leaf), bench), as_dict(result))


def efficiency_row(budget: float, flops: float, kv: float, ms: float) -> dict:
    """Returns one measured budget of an efficiency JSON (before ``with_ratios``)."""
    latency = {"vision": ms / 4, "selection": 0.1, "prefill": ms / 2, "decode": ms / 4 - 0.1}
    return {
        "budget": budget,
        "kept_visual": 64 * budget,
        "prefill_len": 40.0,
        "flops": {"prefill": flops, "total": 2 * flops},
        "kv_cache_bytes": kv,
        "latency_ms": {**latency, "total": sum(latency.values())},
    }


def write_efficiency(root: Path, experiment: str) -> None:
    """Writes base/visionzip's ``efficiency.json`` for model tiny as ``mode=efficiency`` does (1.0 first)."""
    full = efficiency_row(1.0, 100.0, 1000.0, 40.0)
    rows = [full, efficiency_row(0.1, 30.0, 300.0, 20.0)]
    payload = {"method": "base", "pruner": "visionzip", "bench": "syn_ocr", "num_items": 2}
    payload["budgets"] = [with_ratios(row, full) for row in rows]
    write_json(efficiency_path(root, experiment, "tiny", "base", "visionzip"), payload)


def write_hand_runs(root: Path, passk: bool = True, efficiency: bool = True) -> Path:
    """Writes ``HAND`` (and a Pass@K leaf and an efficiency file) under ``root/mine`` and returns ``root``."""
    for leaf, scores in HAND.items():
        for bench, score in scores.items():
            write_hand_result(root, NAME, leaf, bench, score)
    if passk:
        leaf = leaf_dir(root, NAME, "tiny", "base", "visionzip", 0.1)
        write_passk_leaf(leaf, "syn_count", 0.1, ([True, False, True], [2, 1, 3]), [0, 0, 0], 4)
    if efficiency:
        write_efficiency(root, NAME)
    return root


def compose_named(root: Path, name: str = NAME, *overrides: str) -> DictConfig:
    """Returns ``conf/make_tables.yaml`` as ``make_tables experiment=<name>`` with no preset delivers it: the
    name set, ``grid`` left null (the command line's rewriting of such a name is tested in tests/cli)."""
    with initialize_config_dir(version_base=None, config_dir=str(wf.CONF_DIR)):
        cfg = compose("make_tables", overrides=[f"results_root={root}", "logger=none", *overrides])
    OmegaConf.update(cfg, "experiment", name)
    return cfg


def csv_rows(path: Path) -> dict[tuple[str, ...], dict[str, str]]:
    """Returns a block CSV's rows keyed by (model, budget, method, pruner)."""
    rows = csv.DictReader(io.StringIO(path.read_text()))
    return {(r["model"], r["budget"], r["method"], r["pruner"]): r for r in rows}


def test_a_name_without_a_preset_tables_every_leaf_found(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    paths = run(compose_named(write_hand_runs(tmp_path)))
    out = tmp_path / NAME / "tables"
    tiny = csv_rows(out / "tiny.csv")
    assert list(tiny) == [  # the full-context row first, then by budget; only the leaves that exist
        ("tiny", "1", "Vanilla", "visionzip"),
        ("tiny", "0.1", "Vanilla", "visionzip"),
        ("tiny", "0.1", "scopd_plus+seed1", "visionzip"),
        ("tiny", "0.05", "Vanilla", "cdpruner"),
    ]
    assert tiny[("tiny", "0.1", "Vanilla", "visionzip")]["Avg"] == "55.00"  # (30/50 + 20/40) / 2
    trained = tiny[("tiny", "0.1", "scopd_plus+seed1", "visionzip")]
    assert (trained["syn_count"], trained["syn_ocr"]) == ("40.00", "—")
    assert f"syn_ocr: not run (no result file under {tmp_path}/{NAME}/" in trained["notes"]
    video = csv_rows(out / "tiny_video.csv")  # one table per model, its own benchmarks
    assert list(video) == [("tiny_video", "1", "Vanilla", "visionzip")]
    assert "syn_count" not in next(iter(video.values()))
    assert (out / "tiny.recovery.md").is_file()  # a trained row gets its recovery table
    passk = (out / "passk.md").read_text()
    assert "| tiny | syn_count | Vanilla | visionzip | 0.1 | 3 |" in passk
    assert "| tiny | syn_count | Vanilla | visionzip | 1 | — |" in passk and "not run" in passk  # never run
    efficiency = (out / "efficiency.csv").read_text()
    assert "tiny,Vanilla,visionzip,0.1,6.40,30.00,30.00,30.00,50.00" in efficiency
    assert out / "README.md" in paths
    printed = capsys.readouterr().out
    assert (
        f"make_tables: found under {tmp_path}/{NAME}/: 6 leaves, 2 models (tiny, tiny_video), "
        "2 methods (base, scopd_plus+seed1), 3 benchmarks (syn_count, syn_ocr, syn_pope); "
        "modes: greedy (9 results), passk (1 result), efficiency (1 run)"
    ) in printed
    # the second full-context leaf cannot share the one full-context row: it is named, not dropped silently
    assert "not tabled: tiny/base/cdpruner/1 (syn_count)" in printed


def test_only_the_modes_that_were_run_get_their_outputs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run(compose_named(write_hand_runs(tmp_path, passk=False, efficiency=False)))
    out = tmp_path / NAME / "tables"
    assert (out / "tiny.md").is_file() and not (out / "passk.md").exists() and not (out / "efficiency.md").exists()
    assert "modes: greedy (9 results)\n" in capsys.readouterr().out


def test_a_name_with_nothing_under_it_is_refused_naming_the_names_that_hold_results(tmp_path: Path) -> None:
    write_hand_runs(tmp_path)
    with pytest.raises(ValueError, match=rf"no result under {tmp_path}/mnie/") as err:  # a typo, no preset
        run(compose_named(tmp_path, "mnie"))
    assert "did you mean experiment=mine?" in str(err.value)
    assert f"{tmp_path}/{NAME}/ (11 files): make_tables experiment=mine" in str(err.value)
    assert not (tmp_path / "mnie").exists()


def test_make_tables_dev_tables_what_evaluate_wrote_by_hand(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The issue's case: the hand commands write under the default experiment ``dev``, which has no preset."""
    model_dir = build_model_dir(tmp_path / "model", "qwen2_5_vl", weights=True)
    benches = {b: write_bench(tmp_path / f"{b}.tsv", b, 3, SIDE) for b in ("syn_count", "syn_pope")}
    overrides = ["bench=synthetic", *base_overrides(model_dir, tmp_path / "results", benches, 4)]
    overrides += [f"~bench.{b}" for b in ("syn_detail", "syn_spatial", "syn_ocr", "syn_mcq")]
    for budget in ("1", "0.25"):
        evaluate(compose_eval([*overrides, f"budget={budget}"]))
    run(compose_named(tmp_path / "results", "dev", "bootstrap.too_few=no_interval"))
    rows = csv_rows(tmp_path / "results" / "dev" / "tables" / "tiny.csv")
    assert list(rows) == [("tiny", "1", "Vanilla", "visionzip"), ("tiny", "0.25", "Vanilla", "visionzip")]
    for row in rows.values():  # the random-weight model's scores, read from the leaves evaluate wrote
        assert float(row["syn_count"]) >= 0 and float(row["syn_pope"]) >= 0
    assert "2 leaves, 1 model (tiny), 1 method (base), 2 benchmarks" in capsys.readouterr().out


def test_train_seeds_and_grid_files_need_a_preset(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="train_seeds=.*no preset"):
        run(compose_named(write_hand_runs(tmp_path), NAME, "train_seeds=[0,1]"))


def test_the_cli_tables_a_preset_folder_as_found_with_grid_null(tmp_path: Path) -> None:
    for leaf, scores in HAND.items():
        for bench, score in scores.items():
            write_hand_result(tmp_path, "tiny", leaf, bench, score)
    script = wf.REPO_DIR / "src" / "make_tables.py"
    cmd = [sys.executable, str(script), "experiment=tiny", "grid=null", f"results_root={tmp_path}", "logger=none"]
    done = subprocess.run(cmd, cwd=wf.REPO_DIR, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "6 leaves, 2 models" in done.stdout and "modes: greedy (9 results)" in done.stdout
    assert (tmp_path / "tiny" / "tables" / "tiny_video.md").is_file()


def _write_preset_results(root: Path) -> None:
    for (method, pruner, budget), scores in SCORES.items():
        for bench, score in scores.items():
            write_result(root, method, pruner, budget, bench, score)


def test_a_preset_names_the_hand_runs_outside_its_grid(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _write_preset_results(tmp_path)
    write_result(tmp_path, "scopd", "visionzip", 0.3, "syn_count", 44.0)  # by hand, at a budget the grid lacks
    write_result(tmp_path, "base", "cdpruner", 0.1, "syn_count", 21.0)
    write_result(tmp_path, "base", "cdpruner", 0.1, "syn_ocr", 11.0)
    run(compose_tables(tmp_path, grid={**GRID, "passk": None, "efficiency": None}))
    printed = capsys.readouterr().out
    assert (
        f"make_tables: 2 leaves under {tmp_path}/tiny/ hold results outside the grid of experiment=tiny, "
        "not tabled: tiny/base/cdpruner/0.1 (syn_count, syn_ocr), tiny/scopd/visionzip/0.3 (syn_count)"
    ) in printed
    assert "grid=null" in printed and "experiment=<a name with no preset>" in printed


def test_a_preset_with_empty_blocks_says_how_to_render_the_others(tmp_path: Path) -> None:
    _write_preset_results(tmp_path)  # score tables filled, no Pass@K or efficiency file
    write_result(tmp_path, "scopd", "visionzip", 0.3, "syn_count", 44.0)
    with pytest.raises(NoResultsError, match=r"\['passk', 'efficiency'\]") as err:
        run(compose_tables(tmp_path))
    message = str(err.value)
    assert "render only the blocks with results: blocks=[sweep,main]" in message
    assert "1 leaf outside the grid" in message and "grid=null" in message
