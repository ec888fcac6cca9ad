"""``make_tables``: a fake results tree of a small grid becomes tables, recovery, plots and the efficiency table.

The grid is the tiny preset with its keys replaced (as a Snakemake ``--configfile`` would): two benchmarks, a
sweep over random and the unsupported fastv, and a main block with SCOPD. Scores are chosen so that every
retain ratio and recovery below can be checked by hand.
"""

from __future__ import annotations

import csv
import io
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from sparsectx import workflow as wf
from sparsectx.eval.results import BenchResult, as_dict, write_json
from sparsectx.paths import leaf_dir, result_path
from sparsectx.report import study
from sparsectx.report.study import load_tables_config, run

from .passk_fakes import write_passk_leaf

FASTV = "FastV prunes inside the LLM at layer K; sparsectx.pruning has pre-LLM operators only"
BENCHES = ["syn_count", "syn_ocr"]
ROW = {"methods": ["base"], "pruners": ["visionzip"], "budgets": [0.1]}
GRID = {
    "pruners": {"visionzip": {}, "random": {}, "fastv": {"unsupported": FASTV}},
    "benchmarks": {"syn_count": {}, "syn_ocr": {}},
    "methods": {"scopd": {"pruner": "visionzip", "budgets": [0.1]}},
    "tables": {
        "sweep": {
            "models": ["tiny"],
            "benchmarks": BENCHES,
            "rows": [{"methods": ["base"], "pruners": ["random", "fastv"], "budgets": [0.2, 0.1]}],
        },
        "main": {
            "models": ["tiny"],
            "benchmarks": BENCHES,
            "rows": [{"methods": ["base", "scopd"], "pruners": ["visionzip"], "budgets": [0.2, 0.1]}],
        },
    },
    "passk": {"models": ["tiny"], "benchmarks": ["syn_count"], "rows": [ROW]},
    "efficiency": {
        "models": ["tiny"],
        "benchmarks": ["syn_ocr"],
        "rows": [{"methods": ["base"], "pruners": ["visionzip", "fastv"], "budgets": [0.2, 0.1]}],
    },
}
SCORES = {  # (method, pruner, budget) -> {bench: score}; base/random/0.1 has no syn_ocr result
    ("base", "visionzip", 1.0): {"syn_count": 50.0, "syn_ocr": 40.0},
    ("base", "visionzip", 0.2): {"syn_count": 40.0, "syn_ocr": 36.0},
    ("base", "visionzip", 0.1): {"syn_count": 30.0, "syn_ocr": 20.0},
    ("scopd", "visionzip", 0.2): {"syn_count": 45.0, "syn_ocr": 39.0},
    ("scopd", "visionzip", 0.1): {"syn_count": 40.0, "syn_ocr": 30.0},
    ("base", "random", 0.2): {"syn_count": 35.0, "syn_ocr": 30.0},
    ("base", "random", 0.1): {"syn_count": 25.0},
}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def compose_tables(root: Path, *overrides: str, grid: dict | None = GRID) -> DictConfig:
    """Returns ``conf/make_tables.yaml`` for the tiny preset under ``root``, its grid keys replaced by ``grid``."""
    with initialize_config_dir(version_base=None, config_dir=str(wf.CONF_DIR)):
        cfg = compose("make_tables", overrides=["experiment=tiny", f"results_root={root}", "logger=none", *overrides])
    for key, value in (grid or {}).items():
        OmegaConf.update(cfg, f"grid.{key}", value, merge=False)
    return cfg


def write_result(root: Path, method: str, pruner: str, budget: float, bench: str, score: float, version: int = 1):
    """Writes one ``BenchResult`` JSON where ``evaluate.py`` would."""
    result = BenchResult(
        method=method,
        pruner=pruner,
        budget=budget,
        benchmark=bench,
        score=score,
        scorer_version=version,
        scorer="exact_match",
        extractor_version=1,
        metrics={"score": score},
        dataset_name=bench,
        experiment="tiny",
        seed=0,
        pruner_params={},
        model={"name": "tiny"},
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
    write_json(result_path(leaf_dir(root, "tiny", "tiny", method, pruner, budget), bench), as_dict(result))


def write_passk(root: Path, budget: float, greedy: list[bool], correct: list[int], control: list[int]) -> None:
    """Writes a ``syn_count.passk.json`` and its draws (``passk_fakes``): n = 4 samples, ``correct[i]`` of them
    right on item i, ``control[i]`` without the image."""
    leaf = leaf_dir(root, "tiny", "tiny", "base", "visionzip", budget)
    write_passk_leaf(leaf, "syn_count", budget, (greedy, correct), control, 4)


def _efficiency_row(budget: float, kept: float, ratios: tuple[float, ...], total_ms: float) -> dict:
    prefill, total, kv, lat_prefill, lat_decode, lat_total = ratios
    latency = {
        "vision": 1.0,
        "selection": 0.1,
        "prefill": lat_prefill,
        "decode": lat_decode,
        "total": lat_total,
    }
    return {
        "budget": budget,
        "kept_visual": kept,
        "prefill_len": 40.0,
        "flops": {},
        "kv_cache_bytes": 1.0,
        "latency_ms": {"total": total_ms},
        "ratios": {"prefill_flops": prefill, "total_flops": total, "kv_cache": kv, "latency": latency},
    }


def write_efficiency(root: Path) -> None:
    """Writes base/visionzip's ``efficiency.json`` (budget 1.0 and the grid's two budgets)."""
    rows = [
        _efficiency_row(1.0, 64.0, (1, 1, 1, 1, 1, 1), 31.0),
        _efficiency_row(0.2, 12.8, (0.25, 0.5, 0.3, 0.4, 0.9, 0.8), 24.8),
        _efficiency_row(0.1, 6.4, (0.15, 0.45, 0.2, 0.3, 0.85, 0.7), 21.7),
    ]
    write_json(root / "tiny/tiny/base/visionzip/efficiency.json", {"method": "base", "budgets": rows})


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Returns a results root holding the fake leaves of ``GRID``."""
    for (method, pruner, budget), scores in SCORES.items():
        for bench, score in scores.items():
            write_result(tmp_path, method, pruner, budget, bench, score)
    write_passk(tmp_path, 0.1, [True] * 4 + [False] * 4, [2, 2, 2, 2, 1, 1, 0, 0], [0] * 8)
    write_passk(tmp_path, 1.0, [True] * 8, [4, 4, 4, 3, 4, 3, 4, 4], [1] + [0] * 7)
    write_efficiency(tmp_path)
    return tmp_path


def read_csv(path: Path) -> dict[tuple[str, ...], dict[str, str]]:
    """Returns the rows of a block CSV keyed by (budget, method, pruner)."""
    rows = csv.DictReader(io.StringIO(path.read_text()))
    return {(r["budget"], r["method"], r["pruner"]): r for r in rows}


def png_size(path: Path) -> tuple[int, int]:
    """Returns (width, height) of a PNG after checking its signature and end chunk."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    assert data.rstrip(b"\x00")[-8:-4] == b"IEND"
    return struct.unpack(">II", data[16:24])


def test_block_tables_have_hand_computed_retain_ratios(results: Path) -> None:
    run(compose_tables(results))
    out = results / "tiny" / "tables"
    main = read_csv(out / "main.csv")
    assert main[("1", "Vanilla", "visionzip")]["Avg"] == "100.00"
    assert main[("0.2", "Vanilla", "visionzip")]["Avg"] == "85.00"  # (40/50 + 36/40) / 2
    assert main[("0.2", "SCOPD", "visionzip")]["Avg"] == "93.75"  # (45/50 + 39/40) / 2
    assert main[("0.1", "Vanilla", "visionzip")]["Avg"] == "55.00"  # (30/50 + 20/40) / 2
    assert main[("0.1", "SCOPD", "visionzip")]["Avg"] == "77.50"  # (40/50 + 30/40) / 2
    assert main[("0.1", "SCOPD", "visionzip")]["best"] == "syn_count;syn_ocr;Avg"
    assert {row["model"] for row in main.values()} == {"tiny"}
    assert "| SCOPD | visionzip | **45.00** | **39.00** | **93.75** |" in (out / "main.md").read_text()
    tex = (out / "main.tex").read_text()
    assert "\\begin{tabular}" in tex and "\\textbf{93.75}" in tex


def test_missing_cells_are_footnoted_with_their_reason(results: Path) -> None:
    run(compose_tables(results))
    out = results / "tiny" / "tables"
    sweep = read_csv(out / "sweep.csv")
    assert list(sweep)[0] == ("1", "Vanilla", "visionzip")  # the reference row opens every block table
    assert sweep[("0.2", "Vanilla", "random")]["Avg"] == "72.50"  # (35/50 + 30/40) / 2
    partial = sweep[("0.1", "Vanilla", "random")]
    assert (partial["syn_count"], partial["syn_ocr"], partial["Avg"]) == ("25.00", "—", "—")
    assert "syn_ocr: no result record" in partial["notes"]
    assert "Avg: the average needs a score on every benchmark" in partial["notes"]
    assert f"syn_count: pruner fastv: {FASTV}" in sweep[("0.2", "Vanilla", "fastv")]["notes"]
    md = (out / "sweep.md").read_text()
    assert "Vanilla / random / 10%: syn_ocr" in md and f"pruner fastv: {FASTV}" in md
    assert "no result record" in (out / "sweep.tex").read_text()


def test_recovery_table_for_blocks_with_trained_methods(results: Path) -> None:
    run(compose_tables(results))
    out = results / "tiny" / "tables"
    recovery = read_csv(out / "main.recovery.csv")
    at_20 = recovery[("0.2", "SCOPD", "visionzip")]
    assert (at_20["syn_count"], at_20["syn_ocr"], at_20["Mean"]) == (
        "50.00",
        "75.00",
        "62.50",
    )  # (45-40)/(50-40)
    assert recovery[("0.1", "SCOPD", "visionzip")]["Mean"] == "50.00"  # (40-30)/(50-30), (30-20)/(40-20)
    assert set(recovery) == {("0.2", "SCOPD", "visionzip"), ("0.1", "SCOPD", "visionzip")}
    assert not (out / "sweep.recovery.md").exists()  # no trained method in the sweep


def test_plots_are_valid_pngs_and_listed_in_the_index(results: Path) -> None:
    paths = run(compose_tables(results))
    out = results / "tiny" / "tables"
    pngs = ["retain_sweep_tiny.png", "retain_main_tiny.png", "passk_tiny_syn_count_base_visionzip_0.1.png"]
    captions = [name.replace(".png", ".caption.md") for name in pngs]
    for name, caption in zip(pngs, captions, strict=True):
        width, height = png_size(out / name)
        assert width > 100 and height > 100
        assert out / name in paths and out / caption in paths
    readme = (out / "README.md").read_text()
    for name in ["sweep", "main", "main.recovery", "passk", "efficiency", *pngs, *captions]:
        assert name in readme
    retain = (out / "retain_main_tiny.caption.md").read_text()
    assert retain.splitlines()[0] == "# Retain ratio vs. budget: main, model tiny"  # experiment, model once
    assert "Data: experiment `tiny`, model `tiny`, table `main` (main.md, whose footnotes" in retain
    passk = (out / "passk_tiny_syn_count_base_visionzip_0.1.caption.md").read_text()
    assert "Cohort: the 8 items the full-context model solved; n = 4 samples per item." in passk
    assert all(p.is_file() for p in paths) and paths[-1] == out / "README.md"
    assert not list(out.glob(".*.tmp*"))  # atomic writes leave no temporary file


def test_passk_row_without_draws_keeps_its_values_and_says_why(results: Path) -> None:
    leaf = leaf_dir(results, "tiny", "tiny", "base", "visionzip", 1.0)
    (leaf / "syn_count.passk.samples.jsonl").unlink()
    run(compose_tables(results))
    out = results / "tiny" / "tables"
    passk = {r["budget"]: r for r in csv.DictReader(io.StringIO((out / "passk.csv").read_text()))}
    assert passk["1"]["pass@n (%)"] == "100.00" and passk["1"]["pass@n (%) lo"] == "" and passk["1"]["note"] == ""
    assert passk["0.1"]["pass@n (%) lo"] != ""
    md = (out / "passk.md").read_text()
    assert md.rstrip().endswith(
        "No interval: tiny / syn_count / Vanilla / visionzip / 1 (no per-item draws: "
        "syn_count.passk.samples.jsonl is not beside the Pass@K JSON)"
    )


def test_passk_and_efficiency_tables(results: Path) -> None:
    run(compose_tables(results))
    out = results / "tiny" / "tables"
    passk = {r["budget"]: r for r in csv.DictReader(io.StringIO((out / "passk.csv").read_text()))}
    # budget 0.1: greedy 4 of 8; pass@1 = (4 * 2 + 2 * 1) / 32; pass@4 = 6 of 8 items with a right sample
    assert [passk["0.1"][c] for c in ("greedy (%)", "pass@1 (%)", "pass@n (%)", "gap (pp)")] == [
        "50.00",
        "31.25",
        "75.00",
        "25.00",
    ]
    assert passk["0.1"]["gap over control (pp)"] == "25.00" and passk["1"]["pass@n (%)"] == "100.00"
    assert passk["1"]["gap (pp)"] == "0.00" and passk["1"]["gap over control (pp)"] == "-12.50"
    # the full context's greedy and pass@4 are right on every item: no resample moves them
    assert [passk["1"][f"pass@n (%) {end}"] for end in ("lo", "hi")] == ["100.00", "100.00"]
    lo, hi = (float(passk["0.1"][f"gap (pp) {end}"]) for end in ("lo", "hi"))
    assert 0.0 <= lo < 25.0 < hi <= 75.0  # two of eight items carry the gap (100 each)
    md = (out / "passk.md").read_text()
    assert f"| 25.00 [{lo:.2f}, {hi:.2f}] |" in md and "percentile interval of a bootstrap over the cohort" in md
    rows = list(csv.DictReader(io.StringIO((out / "efficiency.csv").read_text())))
    by_budget = {(r["pruner"], r["budget"]): r for r in rows}
    row = by_budget[("visionzip", "0.2")]
    assert [row[c] for c in ("prefill FLOPs (%)", "KV cache (%)", "total latency (%)", "total latency (ms)")] == [
        "25.00",
        "30.00",
        "80.00",
        "24.80",
    ]
    assert by_budget[("visionzip", "1")]["prefill FLOPs (%)"] == "100.00"
    assert by_budget[("fastv", "0.1")]["note"] == f"pruner fastv: {FASTV}"
    assert "| tiny | Vanilla | visionzip | 0.1 | 6.40 | 15.00 |" in (out / "efficiency.md").read_text()


def test_missing_efficiency_file_is_a_noted_row_and_no_block_no_table(tmp_path: Path) -> None:
    run(compose_tables(tmp_path, "allow_empty=true"))  # an empty results tree: every cell is missing
    out = tmp_path / "tiny" / "tables"
    rows = list(csv.DictReader(io.StringIO((out / "efficiency.csv").read_text())))
    assert {r["note"] for r in rows if r["pruner"] == "visionzip"} == {"no result record"}
    assert "not drawn" in (out / "README.md").read_text()
    other = tmp_path / "other"
    run(compose_tables(other, "allow_empty=true", grid={**GRID, "efficiency": None, "passk": None}))
    assert not (other / "tiny" / "tables" / "efficiency.md").exists()
    assert not (other / "tiny" / "tables" / "passk.md").exists()


def test_mixed_scorer_versions_and_misplaced_results_raise(results: Path) -> None:
    write_result(results, "base", "random", 0.2, "syn_count", 35.0, version=2)
    with pytest.raises(ValueError, match="mixes scorer_version"):
        run(compose_tables(results))
    write_result(results, "base", "random", 0.2, "syn_count", 35.0)
    path = result_path(leaf_dir(results, "tiny", "tiny", "base", "random", 0.1), "syn_count")
    path.write_text(path.read_text().replace('"pruner": "random"', '"pruner": "visionzip"'))
    with pytest.raises(ValueError, match="but its path names"):
        run(compose_tables(results))


def add_vlmeval_scores(root: Path, offset: float) -> None:
    """Adds a ``vlmeval`` block (as ``src/vlmeval_score.py`` writes it) to every result: the score + offset."""
    for path in root.rglob("*.json"):
        payload = json.loads(path.read_text())
        if "benchmark" in payload and "score" in payload:
            block = {"dataset": payload["benchmark"], "score": payload["score"] + offset, "agrees": False}
            write_json(path, {**payload, "vlmeval": block})


def test_score_source_vlmeval_reads_vlmevalkits_scores(results: Path) -> None:
    add_vlmeval_scores(results, 2.0)
    run(compose_tables(results, "score_source=vlmeval"))
    out = results / "tiny" / "tables"
    main = read_csv(out / "main.csv")
    assert main[("0.2", "SCOPD", "visionzip")]["syn_count"] == "47.00"  # VLMEvalKit's 45 + 2, not 45
    assert main[("0.2", "Vanilla", "visionzip")]["Avg"] == f"{(42 / 52 + 38 / 42) / 2 * 100:.2f}"
    assert "VLMEvalKit's evaluate" in (out / "main.md").read_text()
    run(compose_tables(results))  # the default source still reads the project's scores
    assert read_csv(out / "main.csv")[("0.2", "SCOPD", "visionzip")]["syn_count"] == "45.00"


def test_score_source_vlmeval_without_a_vlmeval_block_names_the_command(results: Path) -> None:
    with pytest.raises(ValueError, match=r"no VLMEvalKit score .*src/vlmeval_score.py result="):
        run(compose_tables(results, "score_source=vlmeval"))
    with pytest.raises(ValueError, match="score_source"):
        load_tables_config(compose_tables(results, "score_source=vlmevalkit"))


def test_tables_and_plots_are_logged(results: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logged: dict[str, list] = {"tables": [], "images": [], "finished": []}

    class Recorder:
        def log_table(self, key: str, columns: list[str], rows: list[list[str]]) -> None:
            logged["tables"].append((key, columns, rows))

        def log_image(self, key: str, path: Path) -> None:
            logged["images"].append(key)

        def finish(self) -> None:
            logged["finished"].append(True)

    monkeypatch.setattr(study, "start_run", lambda *args: Recorder())
    run(compose_tables(results))
    tables = {key: (columns, rows) for key, columns, rows in logged["tables"]}
    assert set(tables) >= {
        "tables/main",
        "tables/main.recovery",
        "tables/sweep",
        "tables/passk",
        "tables/efficiency",
    }
    assert tables["tables/main"][0][:4] == ["model", "budget", "method", "pruner"]
    assert "plots/retain_main_tiny" in logged["images"] and logged["finished"] == [True]


def test_config_is_checked() -> None:
    with initialize_config_dir(version_base=None, config_dir=str(wf.CONF_DIR)):
        no_preset = compose("make_tables", overrides=["logger=none"])
        typo = compose("make_tables", overrides=["experiment=tiny", "logger=none", "+decimal=3"])
    with pytest.raises(MissingMandatoryValue, match="experiment"):
        load_tables_config(no_preset)
    with pytest.raises(Exception, match="decimal"):
        load_tables_config(typo)
    with pytest.raises(ValueError, match="method_labels lacks 'base'"):
        load_tables_config(compose_tables(Path("results"), "~method_labels.base"))


def test_cli_runs_on_the_tiny_preset(tmp_path: Path) -> None:
    script = wf.REPO_DIR / "src" / "make_tables.py"
    cmd = [
        sys.executable,
        str(script),
        "experiment=tiny",
        f"results_root={tmp_path}",
        "logger=none",
        "allow_empty=true",
    ]
    done = subprocess.run(cmd, cwd=wf.REPO_DIR, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "tiny" / "tables"
    assert str(out / "README.md") in done.stdout
    for block in ("sweep", "main", "pruner_generalization", "extreme_budget"):
        assert all((out / f"{block}.{ext}").is_file() for ext in ("md", "tex", "csv"))


@pytest.mark.parametrize("preset", sorted(p.stem for p in (wf.CONF_DIR / "experiment").glob("*.yaml")))
def test_every_preset_renders_with_no_results(preset: str, tmp_path: Path) -> None:
    with initialize_config_dir(version_base=None, config_dir=str(wf.CONF_DIR)):
        cfg = compose(
            "make_tables",
            overrides=[f"experiment={preset}", f"results_root={tmp_path}", "logger=none", "allow_empty=true"],
        )
    run(cfg)
    grid = wf.load_grid(preset)
    out = tmp_path / preset / "tables"
    for block in (b for b in grid.blocks if b.kind == "table"):
        rows = list(csv.DictReader(io.StringIO((out / f"{block.name}.csv").read_text())))
        assert {r["model"] for r in rows} == set(block.models)
        model, budget = block.models[-1], min(b for row in block.rows for b in row.budgets)
        shown = [r["pruner"] for r in rows if r["model"] == model and float(r["budget"]) == budget]
        declared = [p for row in block.rows if budget in row.budgets for p in row.pruners]
        assert list(dict.fromkeys(shown)) == list(dict.fromkeys(declared))  # the grid's pruner order


def test_blocks_render_only_the_named_blocks_and_the_same_numbers(results: Path) -> None:
    out = results / "tiny" / "tables"
    run(compose_tables(results))
    whole = (out / "main.csv").read_text()
    others = {path.name for path in out.iterdir() if "main" not in path.name and path.name != "README.md"}
    assert {"sweep.csv", "passk.csv", "efficiency.csv"} <= others
    for path in out.iterdir():
        path.unlink()
    run(compose_tables(results, "blocks=[main]"))
    names = {path.name for path in out.iterdir()}
    assert "main.csv" in names and "README.md" in names and not names & others, names
    assert (out / "main.csv").read_text() == whole


def test_seed_checks_see_only_the_named_blocks(results: Path) -> None:
    with pytest.raises(ValueError, match=r"train_seeds=\[0, 1\] asks for seeds that were not trained"):
        run(compose_tables(results, "train_seeds=[0,1]"))  # main's scopd has no seed-1 result
    run(compose_tables(results, "train_seeds=[0,1]", "blocks=[sweep,passk]"))  # no trained method there
    assert (results / "tiny" / "tables" / "sweep.csv").is_file()


@pytest.mark.parametrize(
    ("blocks", "unknown"), [("[main,nope]", r"\['nope'\]"), ("[main,main]", r"\[\]"), ("[]", r"\[\]")]
)
def test_bad_block_names_fail_before_any_table(results: Path, blocks: str, unknown: str) -> None:
    known = r"the grid has \['sweep', 'main', 'passk', 'efficiency'\]"
    with pytest.raises(ValueError, match=rf"blocks=.*each once; unknown {unknown}, {known}"):
        run(compose_tables(results, f"blocks={blocks}"))
    assert not (results / "tiny" / "tables").exists()


def test_paper_numeric_sources_get_a_pooled_row_and_figure(tmp_path: Path) -> None:
    grid = {**GRID, "passk": {"models": ["tiny"], "benchmarks": BENCHES, "rows": [ROW]}}
    for budget, count, ocr in ((0.1, [2, 2, 1, 0], [4, 0, 0]), (1.0, [4, 4, 4, 3], [4, 4, 2])):
        leaf = leaf_dir(tmp_path, "tiny", "tiny", "base", "visionzip", budget)
        write_passk_leaf(leaf, "syn_count", budget, ([c > 1 for c in count], count), [0] * 4, 4, "paper_numeric")
        write_passk_leaf(leaf, "syn_ocr", budget, ([c > 3 for c in ocr], ocr), [0] * 3, 4, "paper_numeric")
    run(compose_tables(tmp_path, "allow_empty=true", "bootstrap.resamples=50", grid=grid))
    out = tmp_path / "tiny" / "tables"
    rows = list(csv.DictReader(io.StringIO((out / "passk.csv").read_text())))
    pooled = {r["budget"]: r for r in rows if r["benchmark"] == "pooled: syn_count+syn_ocr"}
    # budget 0.1 over 7 items: greedy right on 2 + 1; pass@4 right where any sample is: 3 + 1
    assert pooled["0.1"]["cohort"] == "7" and pooled["0.1"]["greedy (%)"] == f"{300 / 7:.2f}"
    assert pooled["0.1"]["pass@n (%)"] == f"{400 / 7:.2f}" and pooled["0.1"]["gap (pp)"] == f"{100 / 7:.2f}"
    assert pooled["0.1"]["pass@n (%) lo"] != ""
    assert (out / "passk_tiny_pooled_base_visionzip_0.1.png").read_bytes().startswith(PNG_SIGNATURE)
    assert "Rows `pooled: a+b`" in (out / "passk.md").read_text()
