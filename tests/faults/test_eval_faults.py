"""Fault injection on evaluation: bad benchmark rows, benchmark files changed in place, damaged result files.

Issue 13, findings 2 and 3: a skipped row must be reported, counted, footnoted and refused above
``max_skip_fraction``; a result is keyed by the content of its inputs, so a TSV fixed in place recomputes;
a result JSON that is torn or not a result is recomputed, never trusted.
"""

from __future__ import annotations

import base64
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from eval.test_runner_support import SIDE, base_overrides, build_model_dir, compose_eval, write_bench
from report.test_study import SCORES, compose_tables, read_csv, write_result

from sparsectx.eval.runner import run
from sparsectx.paths import leaf_dir, result_path
from sparsectx.report.study import run as make_tables

pytestmark = pytest.mark.faults
BENCH = "syn_count"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("model"), "qwen2_5_vl", weights=True)


def _cfg(model_dir: Path, results: Path, tsv: Path, *extra: str):
    return compose_eval([f"bench={BENCH}", *base_overrides(model_dir, results, {BENCH: tsv}, 4), "budget=0.25", *extra])


def _damage(tsv: Path, rows: dict[int, str]) -> None:
    """Rewrites data row ``i`` of ``tsv``: ``"image"`` = a truncated PNG, ``"answer"`` = an empty answer."""
    lines = tsv.read_text(encoding="utf-8").splitlines(keepends=True)
    header = lines[0].rstrip("\n").split("\t")
    for i, what in rows.items():
        cells = lines[1 + i].rstrip("\n").split("\t")
        if what == "image":
            png = base64.b64decode(cells[header.index("image")])
            cells[header.index("image")] = base64.b64encode(png[:60]).decode("ascii")
        else:
            cells[header.index("answer")] = ""
        lines[1 + i] = "\t".join(cells) + "\n"
    tsv.write_text("".join(lines), encoding="utf-8")


def _leaf(results: Path) -> Path:
    return leaf_dir(results, "dev", "tiny", "base", "visionzip", 0.25)


def test_skipped_rows_above_max_skip_fraction_are_refused_naming_the_file(model_dir, tmp_path):
    tsv = write_bench(tmp_path / f"{BENCH}.tsv", BENCH, 6, SIDE)
    _damage(tsv, {1: "image", 4: "answer"})  # 2 of 6 rows unusable (the 4/6 case)
    with pytest.raises(ValueError, match="2 of 6 rows") as err:
        run(_cfg(model_dir, tmp_path / "results", tsv, "max_skip_fraction=0.2"))
    message = str(err.value)
    assert str(tsv) in message and "max_skip_fraction=0.2" in message and "does not decode" in message
    assert not result_path(_leaf(tmp_path / "results"), BENCH).exists()


def test_accepted_skips_are_warned_counted_and_footnoted(model_dir, tmp_path, caplog):
    tsv = write_bench(tmp_path / f"{BENCH}.tsv", BENCH, 6, SIDE)
    _damage(tsv, {1: "image", 4: "answer"})
    results = tmp_path / "results"
    with caplog.at_level(logging.WARNING, logger="sparsectx"):
        out = run(_cfg(model_dir, results, tsv, "max_skip_fraction=0.5"))[0]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(tsv) in m and "2 of 6 rows" in m and "does not decode" in m for m in warned), warned
    result = json.loads(out.read_text())
    assert (result["n_rows"], result["n_scored"], result["n_skipped"]) == (6, 4, 2)
    assert {s["index"] for s in result["skipped"]} == {"1", "4"}
    assert any("empty answer" in s["reason"] for s in result["skipped"])


def test_tables_footnote_scores_over_fewer_rows(tmp_path):
    for (method, pruner, budget), scores in SCORES.items():
        for bench, score in scores.items():
            write_result(tmp_path, method, pruner, budget, bench, score)
    path = result_path(leaf_dir(tmp_path, "tiny", "tiny", "scopd", "visionzip", 0.1), "syn_ocr")
    payload = json.loads(path.read_text())
    payload.update(n_scored=10, n_skipped=2, skipped=[{"index": "3", "reason": "line 5: empty answer"}] * 2)
    path.write_text(json.dumps(payload))
    make_tables(compose_tables(tmp_path, "allow_empty=true"))  # no Pass@K or efficiency file here
    out = tmp_path / "tiny" / "tables"
    main = read_csv(out / "main.csv")
    noted = main[("0.1", "SCOPD", "visionzip")]
    assert noted["syn_ocr"] == "30.00"  # still scored, but footnoted
    assert "syn_ocr: scored on 10 of 12 rows" in noted["notes"] and "empty answer" in noted["notes"]
    assert noted["Avg"] == "77.50" and "Avg: averages a score with a caveat" in noted["notes"]
    assert main[("0.2", "SCOPD", "visionzip")]["notes"] == ""
    md = (out / "main.md").read_text()
    assert "scored on 10 of 12 rows" in md and "SCOPD / visionzip / 10%: syn_ocr" in md
    assert "scored on 10 of 12 rows" in (out / "main.tex").read_text()
    recovery = read_csv(out / "main.recovery.csv")[("0.1", "SCOPD", "visionzip")]
    assert recovery["syn_ocr"] != "—" and "syn_ocr: scored on 10 of 12 rows" in recovery["notes"]
    assert "Mean: averages a score with a caveat" in recovery["notes"]
    assert "scored on" not in (out / "sweep.md").read_text()  # a table without skipped rows has no such note


def test_benchmark_fixed_in_place_is_recomputed(model_dir, tmp_path):
    tsv = write_bench(tmp_path / f"{BENCH}.tsv", BENCH, 3, SIDE)
    results = tmp_path / "results"
    first = json.loads(run(_cfg(model_dir, results, tsv))[0].read_text())
    assert first["n_scored"] == 3
    write_bench(tsv, BENCH, 4, SIDE)  # the same path, new content
    second = json.loads(run(_cfg(model_dir, results, tsv))[0].read_text())
    assert second["n_scored"] == 4
    assert second["provenance"]["inputs"]["bench_sha256"] != first["provenance"]["inputs"]["bench_sha256"]
    assert second["provenance"]["config_hash"] != first["provenance"]["config_hash"]


def test_passk_cohort_file_changed_in_place_is_recomputed(model_dir, tmp_path):
    from sparsectx.io import append_jsonl

    tsv = write_bench(tmp_path / f"{BENCH}.tsv", BENCH, 3, SIDE)
    cohort = tmp_path / "full" / f"{BENCH}.predictions.jsonl"
    append_jsonl(cohort, [{"id": str(i), "correct": i == 0} for i in range(3)])
    passk = ("mode=passk", "passk.n=2", "passk.sample_batch=2", "passk.max_new_tokens=2", "passk.hit_m=[1]")
    extra = (*passk, f"passk.full_context_leaf={cohort.parent}", "passk.no_image_control=false")
    out = run(_cfg(model_dir, tmp_path / "results", tsv, *extra))[0]
    assert json.loads(out.read_text())["cohort"]["ids"] == ["0"]
    cohort.unlink()
    append_jsonl(cohort, [{"id": str(i), "correct": i != 1} for i in range(3)])  # the reference rerun
    assert json.loads(run(_cfg(model_dir, tmp_path / "results", tsv, *extra))[0].read_text())["cohort"]["ids"] == [
        "0",
        "2",
    ]


@pytest.mark.parametrize("damage", ["truncated", "not_an_object", "no_provenance"])
def test_damaged_result_json_is_recomputed_not_trusted(model_dir, tmp_path, damage):
    tsv = write_bench(tmp_path / f"{BENCH}.tsv", BENCH, 3, SIDE)
    results = tmp_path / "results"
    out = run(_cfg(model_dir, results, tsv))[0]
    good = json.loads(out.read_text())
    text = out.read_text()
    bad = {"truncated": text[: len(text) // 2], "not_an_object": "[1, 2]", "no_provenance": '{"score": 99.0}'}
    out.write_text(bad[damage])
    run(_cfg(model_dir, results, tsv))
    again = json.loads(out.read_text())
    assert again["score"] == good["score"] and again["provenance"]["config_hash"] == good["provenance"]["config_hash"]


KILLER = """
import json, os, signal, sys
from pathlib import Path

sys.path.insert(0, {tests!r})
from eval.test_runner_support import compose_eval

from sparsectx.eval import runner

calls = 0
original = runner.append_jsonl


def append_then_die(path, rows):
    global calls
    calls += 1
    if calls == {kill_at}:
        if {torn}:  # killed inside the write: half a line reaches the file
            with open(path, "a", encoding="utf-8") as handle:
                line = json.dumps(rows[0], sort_keys=True)
                handle.write(line[: len(line) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    original(path, rows)


runner.append_jsonl = append_then_die
runner.run(compose_eval(json.loads(sys.argv[1])))
"""


@pytest.mark.slow
@pytest.mark.parametrize("torn", [False, True], ids=["between_writes", "inside_a_write"])
def test_sigkill_mid_benchmark_resumes_to_identical_predictions(model_dir, tmp_path, torn):
    tsv = write_bench(tmp_path / f"{BENCH}.tsv", BENCH, 5, SIDE)
    extra = ("batch_size=1", "queue_size=1")  # one engine call, and one append, per item
    reference = run(_cfg(model_dir, tmp_path / "clean", tsv, *extra))[0]
    results = tmp_path / "killed"
    overrides = [
        f"bench={BENCH}",
        *base_overrides(model_dir, results, {BENCH: tsv}, 4),
        "budget=0.25",
        *extra,
    ]
    script = tmp_path / "kill.py"
    tests = str(Path(__file__).resolve().parents[1])
    script.write_text(KILLER.format(tests=tests, kill_at=3, torn=torn))
    proc = subprocess.run([sys.executable, str(script), json.dumps(overrides)], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr[-2000:]
    out = result_path(_leaf(results), BENCH)
    assert not out.exists()  # no result JSON until the benchmark is complete
    preds = out.with_name(f"{BENCH}.predictions.jsonl")
    assert len(preds.read_text().splitlines()) == (3 if torn else 2)  # two whole rows (+ a torn one)
    resumed = json.loads(run(_cfg(model_dir, results, tsv, *extra))[0].read_text())
    clean = json.loads(reference.read_text())
    assert resumed["resumed_rows"] == 2
    assert preds.read_text() == reference.with_name(f"{BENCH}.predictions.jsonl").read_text()
    assert resumed["score"] == clean["score"] and resumed["metrics"] == clean["metrics"]
