"""End-to-end greedy evaluation through ``sparsectx.eval.runner.run`` (what ``src/evaluate.py`` calls)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from hydra.errors import ConfigCompositionException, MissingConfigException

from sparsectx.engine import DecodeEngine
from sparsectx.eval import protocol
from sparsectx.eval.config import load_eval_config
from sparsectx.eval.runner import run
from sparsectx.generation import Generation
from sparsectx.io import read_jsonl

from .test_runner_support import (
    CONF,
    SIDE,
    SYNTHETIC,
    base_overrides,
    build_model_dir,
    compose_eval,
    write_bench,
)

REQUIRED = {
    "method",
    "pruner",
    "budget",
    "benchmark",
    "score",
    "scorer_version",
    "scorer",
    "extractor_version",
    "metrics",
    "n_rows",
    "n_scored",
    "skipped",
    "extraction",
    "n_failed",
    "generation",
    "model",
    "seed",
    "wall_time_s",
    "provenance",
}
PROVENANCE = {"config", "config_hash", "git", "packages", "hardware", "schema_version"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("model"), "qwen2_5_vl", weights=True)


@pytest.fixture(scope="module")
def benches(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("data")
    return {bench: write_bench(root / f"{bench}.tsv", bench, 3, SIDE) for bench in SYNTHETIC}


def _cfg(model_dir: Path, results: Path, benches: dict[str, Path], *extra: str, only: str | None = None):
    """Returns the test config: every synthetic benchmark, or ``bench=<only>``, at budget 0.25."""
    chosen = benches if only is None else {only: benches[only]}
    pick = [] if only is None else [f"bench={only}"]
    return compose_eval([*pick, *base_overrides(model_dir, results, chosen, 6), "budget=0.25", *extra])


def test_suite_end_to_end_rerun_skips_and_force_reruns(model_dir, benches, tmp_path, monkeypatch):
    outs = run(_cfg(model_dir, tmp_path, benches))
    leaf = tmp_path / "dev" / "tiny" / "base" / "visionzip" / "0.25"
    assert outs == [leaf / f"{bench}.json" for bench in SYNTHETIC]
    for bench in SYNTHETIC:
        result = json.loads((leaf / f"{bench}.json").read_text())
        assert set(result) >= REQUIRED and set(result["provenance"]) >= PROVENANCE
        assert (result["benchmark"], result["budget"], result["pruner"], result["method"]) == (
            bench,
            0.25,
            "visionzip",
            "base",
        )
        assert result["n_scored"] == 3 and result["mean_kept_visual"] == 4  # round(0.25 * 16) per image
        assert result["generation"]["stop_strings"] == ["</answer>"] and not result["generation"]["do_sample"]
        rows = read_jsonl(leaf / f"{bench}.predictions.jsonl")
        assert [r["id"] for r in rows] == ["0", "1", "2"]
        assert {"id", "prompt", "output", "answer", "correct", "status", "config_hash"} <= set(rows[0])
        assert rows[0]["prompt"].index("<|image_pad|>") < rows[0]["prompt"].index("First think")
    stamp = {p: p.stat().st_mtime_ns for p in leaf.iterdir()}

    def no_model(*_args):
        raise AssertionError("a finished run must not load the model")

    monkeypatch.setattr("sparsectx.eval.runner.load_eval_model", no_model)
    run(_cfg(model_dir, tmp_path, benches))
    assert {p: p.stat().st_mtime_ns for p in leaf.iterdir()} == stamp
    monkeypatch.undo()
    run(_cfg(model_dir, tmp_path, benches, "force=true", only="syn_count"))
    assert (leaf / "syn_count.json").stat().st_mtime_ns != stamp[leaf / "syn_count.json"]
    assert (leaf / "syn_mcq.json").stat().st_mtime_ns == stamp[leaf / "syn_mcq.json"]


def test_interrupted_predictions_resume_without_duplicates(model_dir, benches, tmp_path):
    # A trained checkpoint: method=<preset> names the leaf; checkpoint= replaces model.path (set to nowhere).
    extra = ("method=scopd", "batch_size=1", f"checkpoint={model_dir}")
    cfg = _cfg(model_dir, tmp_path, benches, *extra, only="syn_mcq")
    cfg.model.path = str(tmp_path / "nowhere")
    result_file = run(cfg)[0]
    assert result_file == tmp_path / "dev" / "tiny" / "scopd" / "visionzip" / "0.25" / "syn_mcq.json"
    preds = result_file.with_name("syn_mcq.predictions.jsonl")
    complete = preds.read_text()
    first = json.loads(result_file.read_text())
    assert first["model"]["checkpoint"] == str(model_dir)
    lines = complete.splitlines(keepends=True)
    stale = json.dumps({**json.loads(lines[1]), "config_hash": "stale"}) + "\n"
    preds.write_text(lines[0] + stale + lines[1][: len(lines[1]) // 2])  # killed mid-append
    result_file.unlink()
    run(cfg)
    rows = read_jsonl(preds)
    assert [r["id"] for r in rows] == ["0", "1", "2"]
    assert preds.read_text() == complete  # greedy: the regenerated rows equal the lost ones
    again = json.loads(result_file.read_text())
    assert again["resumed_rows"] == 1 and again["score"] == first["score"]


def test_missing_benchmark_file_names_path_and_build_command(model_dir, benches, tmp_path):
    missing = tmp_path / "absent" / "syn_count.tsv"
    cfg = _cfg(model_dir, tmp_path, benches, f"bench.syn_count.path={missing}", only="syn_count")
    with pytest.raises(FileNotFoundError, match="python src/build_data.py") as err:
        run(cfg)
    assert str(missing) in str(err.value)
    assert not (tmp_path / "dev").exists()  # nothing was started


def test_unknown_benchmark_lists_available_ones():
    with pytest.raises(MissingConfigException) as err:
        compose_eval(["bench=syn_cuont"])
    message = str(err.value)
    assert "bench/syn_cuont" in message
    assert all(name in message for name in (*SYNTHETIC, "synthetic", "scopd13", "ltopd9"))


def _fake_generate(texts: list[str]):
    queue = list(texts)

    def fake(engine, prompts, cfg, generator=None, slots=None, on_finish=None):
        out = [queue.pop(0) for _ in range(len(prompts))]
        return [Generation(torch.tensor([1, 2]), text, True) for text in out]

    return fake


def test_fallback_is_scored_and_counted_and_failures_fail(model_dir, benches, tmp_path, monkeypatch):
    texts = ["<think>I see 3.</think><answer>3</answer>", "There are 3 circles.", "   "]
    monkeypatch.setattr(DecodeEngine, "generate", _fake_generate(texts))
    result_file = run(_cfg(model_dir, tmp_path, benches, only="syn_count"))[0]
    result = json.loads(result_file.read_text())
    assert result["extraction"] == {"tagged": 1, "fallback": 1, "empty": 1, "error": 0}
    assert result["n_failed"] == 1 and result["score"] == pytest.approx(200 / 3)
    rows = read_jsonl(result_file.with_name("syn_count.predictions.jsonl"))
    assert [(r["status"], r["answer"], r["correct"]) for r in rows] == [
        ("tagged", "3", True),
        ("fallback", "There are 3 circles.", True),
        ("empty", None, False),
    ]
    monkeypatch.setattr(DecodeEngine, "generate", _fake_generate(texts))
    with pytest.raises(RuntimeError, match="max_failure_rate"):
        run(_cfg(model_dir, tmp_path, benches, "force=true", "max_failure_rate=0.2", only="syn_count"))


@pytest.mark.parametrize(
    ("override", "error", "match"),
    [
        ("budget=0", ValueError, "budget=0"),
        ("seed=null", ValueError, "seed"),
        ("decoding.do_sample=true", ValueError, "mode=passk"),
        ("mode=beam", ValueError, "mode='beam'"),
        ("bench.syn_count.scorer=exact_mach", KeyError, "exact_match"),
        ("bench.syn_count.group_by=rows", ValueError, "bench.syn_count.group_by"),
    ],
)
def test_bad_values_fail_with_the_key(override, error, match):
    with pytest.raises(error, match=match):
        load_eval_config(compose_eval(["logger=none", override]))


def test_unknown_keys_are_errors():
    with pytest.raises(ConfigCompositionException, match="buget"):
        compose_eval(["buget=0.1"])


def test_prompt_equals_the_training_suite_prompt():
    evaluate = yaml.safe_load((CONF / "evaluate.yaml").read_text())["prompt"]
    training = yaml.safe_load((CONF / "data" / "tiny.yaml").read_text())["prompt"]
    assert evaluate == training


def test_every_bench_config_composes_and_matches_its_stem():
    stems = sorted(p.stem for p in (CONF / "bench").glob("*.yaml"))
    for stem in stems:
        cfg = load_eval_config(compose_eval([f"bench={stem}", "logger=none"]))
        assert all(key == spec.name for key, spec in cfg.bench.items())
        assert stem in cfg.bench or len(cfg.bench) > 1
    names = ("synthetic", "scopd13", "ltopd9")
    suites = {s: len(load_eval_config(compose_eval([f"bench={s}"])).bench) for s in names}
    assert suites == {"synthetic": 6, "scopd13": 13, "ltopd9": 9}


def test_generation_builds_no_autograd_graph(model_dir, benches, tmp_path, monkeypatch):
    """Evaluation records no autograd history (CDPruner's greedy loop would otherwise keep every step's graph)."""
    grad_modes: list[bool] = []
    original = protocol.encode_samples

    def spy(*args, **kwargs):
        grad_modes.append(torch.is_grad_enabled())
        return original(*args, **kwargs)

    monkeypatch.setattr(protocol, "encode_samples", spy)
    run(_cfg(model_dir, tmp_path / "results", benches, "pruner=cdpruner", "budget=0.1", only="syn_count"))
    assert grad_modes and not any(grad_modes)
