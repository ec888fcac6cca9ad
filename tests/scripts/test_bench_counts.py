"""The benchmark scripts count what they generate (issue 44): rates come from the returned sequences.

``scripts/bench_generate.py`` used to assume every sequence decoded ``--new-tokens`` tokens and
``scripts/bench_train_step.py`` fixed every rollout at 155 tokens. These tests hold them to the sequences the
engine and HF ``generate`` hand back: the counted tokens, the per-sequence lengths written to ``--json``, a
call that generated nothing, and rollouts forced to the lengths drawn for them (random weights never stop by
themselves, and the tiny model stops whenever it likes).
"""

from __future__ import annotations

import json
import math
import random
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import GenerationMixin

from sparsectx.engine import decode
from sparsectx.engine.decode import DecodeEngine
from sparsectx.generation import Generation

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))

import bench_common  # noqa: E402
import bench_generate  # noqa: E402
import bench_train_step  # noqa: E402


def test_hf_lengths_end_at_the_first_end_id_hf_was_given() -> None:
    """A row HF finished is padded after its end id; a row without one generated every column."""
    new = torch.tensor([[5, 7, 2, 0, 0], [5, 6, 7, 8, 9], [2, 0, 0, 0, 0]])
    sequences = torch.cat([torch.full((3, 4), 9), new], dim=1)
    assert bench_common.hf_lengths(sequences, 4, {2}) == [3, 5, 1]
    assert bench_common.hf_lengths(sequences, 4, set()) == [5, 5, 5]


def test_length_summary_and_a_call_that_generated_nothing() -> None:
    counted = bench_common.GeneratedLengths([3, 1, 10, 4, 7, 2, 9, 5, 6, 8])
    assert counted.tokens == 55
    assert counted.summary() == {"min": 1, "median": 5.5, "p90": 9, "max": 10}
    assert bench_common.rate_text(0, 2.0) == "no tokens generated"
    assert bench_common.rate_text(300, 2.0) == "150"


def test_lognormal_rollout_lengths_are_seeded_capped_and_centred_on_their_mean() -> None:
    drawn = bench_train_step.RolloutLengths("lognormal", new_tokens=155, mean=155.0, sigma=0.5, seed=3, cap=512)
    lengths = drawn.draw(4000)
    assert lengths == drawn.draw(4000), "the same seed must give the same lengths"
    assert lengths != replace(drawn, seed=4).draw(4000)
    assert drawn.draw(10) == lengths[:10], "a step's lengths must not depend on how many were drawn after"
    assert drawn.draw(10, rank=2) == lengths[20:30], "each process takes its own slice of one stream"
    assert min(lengths) >= 1 and max(lengths) <= 512
    assert abs(statistics.mean(lengths) - 155) < 5
    assert statistics.median(lengths) < 150, "a right tail: the median sits below the mean"
    fixed = replace(drawn, kind="fixed")
    assert fixed.draw(5) == [155] * 5


def test_batches_beyond_the_engines_slots_are_refused_before_any_model_loads(capsys) -> None:
    with pytest.raises(SystemExit):
        bench_generate.parse_args(["--batches", "1", "512"])
    assert "engine.max_slots=256" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench_generate.parse_args(["--queue-multiple", "0"])
    assert bench_generate.parse_args(["--batches", "1", "8", "32", "64", "128", "256"]).batches[-1] == 256


def _ending_half_the_vocabulary(monkeypatch: pytest.MonkeyPatch) -> None:
    """Makes every even token id end a turn (as a ``generation_config`` eos, ``stops.generation_end_ids``): the
    tiny model then stops within a few tokens on its own (4 of 40 on today's code), so only forcing gives
    the lengths asked for."""
    monkeypatch.setattr(
        decode, "generation_end_ids", lambda model: set(range(0, model.config.get_text_config().vocab_size, 2))
    )


def _recorded(monkeypatch: pytest.MonkeyPatch, cut_short: bool, static_oom: bool = False) -> dict[str, list[list]]:
    """Records the per-sequence lengths (and the engine's ``stopped`` flags) each engine / HF generate call
    returns; with ``cut_short`` every other engine generation comes back at half its length, as if it had
    stopped early; with ``static_oom`` HF's static-cache ``generate`` runs out of GPU memory, as it does at large
    batch."""
    calls: dict[str, list[list]] = {"engine": [], "stopped": [], "hf": []}
    engine_generate, hf_generate = DecodeEngine.generate, GenerationMixin.generate

    def engine(self, prompts, sampling, *args, **kwargs):  # noqa: ANN001, ANN202
        outs = engine_generate(self, prompts, sampling, *args, **kwargs)
        if cut_short:
            outs = [
                Generation(g.token_ids[: max(1, g.token_ids.numel() // 2)], g.text, True) if i % 2 else g
                for i, g in enumerate(outs)
            ]
        calls["engine"].append([g.token_ids.numel() for g in outs])
        calls["stopped"].append([g.stopped for g in outs])
        return outs

    def hf(self, *args, **kwargs):  # noqa: ANN001, ANN202
        if static_oom and kwargs["generation_config"].cache_implementation == "static":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        out = hf_generate(self, *args, **kwargs)
        prompt = kwargs["input_ids"].shape[1]
        calls["hf"].append([out.shape[1] - prompt] * out.shape[0])
        return out

    monkeypatch.setattr(DecodeEngine, "generate", engine)
    monkeypatch.setattr(GenerationMixin, "generate", hf)
    return calls


@pytest.mark.slow
def test_bench_generate_counts_the_tokens_the_engine_and_hf_returned(tmp_path, monkeypatch, capsys) -> None:
    """Every row's rate is its counted tokens over its time, its lengths are the returned sequences', and a cell
    out of GPU memory says so while the sweep goes on."""
    calls = _recorded(monkeypatch, cut_short=True, static_oom=True)
    out = tmp_path / "generate.json"
    argv = [
        "--tiny",
        "--contexts",
        "pruned",
        "--batches",
        "2",
        "--queue-multiple",
        "2",
        "--new-tokens",
        "4",
        "--warmup",
        "0",
        "--repeats",
        "1",
        "--shared",
        "--json",
        str(out),
    ]
    monkeypatch.setattr(sys, "argv", ["bench_generate.py", *argv])
    bench_generate.main()
    record = json.loads(out.read_text())
    rows = record["rows"] + record["shared"]
    (static,) = [r for r in rows if r["method"] == "hf-static"]
    assert static["status"] == "oom" and "| hf-static | OOM | OOM |" in capsys.readouterr().out
    rows = [r for r in rows if r["status"] == "ok"]
    engine_rows = [r for r in rows if r["method"].startswith("engine")]
    hf_rows = [r for r in rows if r["method"].startswith("hf")]
    # Each engine cell runs the N-token call, then the 1-token call (warm-up 0, one repeat): the N-token
    # calls are every other recorded call, in row order.
    assert [r["lengths"] for r in engine_rows] == calls["engine"][::2]
    assert [r["lengths"] for r in hf_rows] == calls["hf"][::2]
    assert any(length < 4 for r in engine_rows for length in r["lengths"]), "the early stops were not counted"
    for row in rows:
        assert row["tokens"] == sum(row["lengths"])
        assert row["tokens_per_s"] == pytest.approx(row["tokens"] / row["seconds"])
        assert row["length_summary"]["max"] == max(row["lengths"])
    (engine_row,) = [r for r in record["rows"] if r["method"] == "engine"]
    assert (engine_row["batch"], engine_row["queue"], len(engine_row["lengths"])) == (2, 4, 4)


def _expected_lognormal(count: int, mean: float, sigma: float, seed: int, cap: int) -> list[int]:
    """The documented draw: a log-normal of the given mean and log-spread, rounded, clipped to [1, cap]."""
    rng = random.Random(seed)
    mu = math.log(mean) - sigma**2 / 2
    return [min(cap, max(1, round(rng.lognormvariate(mu, sigma)))) for _ in range(count)]


@pytest.mark.slow
def test_bench_train_step_generates_the_drawn_rollout_lengths(tmp_path, monkeypatch) -> None:
    """The project's rollouts are exactly the drawn lengths (the engine's returned sequences), the reference
    decodes every rollout to the step's longest, and the rates count those tokens."""
    _ending_half_the_vocabulary(monkeypatch)
    calls = _recorded(monkeypatch, cut_short=False)
    out = tmp_path / "step.json"
    argv = [
        "--tiny",
        "--methods",
        "scopd",
        "--batch",
        "4",
        "--visual-tokens",
        "16",
        "--lengths",
        "lognormal",
        "--length-mean",
        "6",
        "--length-sigma",
        "0.6",
        "--length-seed",
        "21",
        "--override",
        "max_new_tokens=10",
        "--warmup",
        "0",
        "--repeats",
        "1",
        "--json",
        str(out),
    ]
    monkeypatch.setattr(sys, "argv", ["bench_train_step.py", *argv])
    bench_train_step.main()
    drawn = _expected_lognormal(4, 6.0, 0.6, 21, 10)
    assert drawn == [2, 7, 1, 10], "seed 21 draws a one-token rollout and one at the cap"
    assert calls["engine"] == [drawn], "the engine must generate exactly the drawn lengths"
    assert calls["stopped"] == [[True, True, True, False]], "an end id ends each, but the cap ends a capped one"
    rows = {row["impl"]: row for row in json.loads(out.read_text())["rows"]}
    assert rows["project"]["lengths"] == drawn
    assert rows["hf-reference"]["lengths"] == calls["hf"][0] == [max(drawn)] * 4
    for row in rows.values():
        assert row["rollout_tokens"] == sum(row["lengths"])
        assert row["rollout_tokens_per_s"] == pytest.approx(row["rollout_tokens"] / row["rollout_s"])


@pytest.mark.slow
def test_fixed_rollouts_run_their_full_length_even_where_the_model_would_stop(tmp_path, monkeypatch) -> None:
    """``--lengths fixed``: every rollout is ``--new-tokens`` long; the model's own end tokens do not shorten it."""
    _ending_half_the_vocabulary(monkeypatch)
    calls = _recorded(monkeypatch, cut_short=False)
    out = tmp_path / "fixed.json"
    argv = [
        "--tiny",
        "--methods",
        "scopd",
        "--batch",
        "3",
        "--visual-tokens",
        "16",
        "--new-tokens",
        "12",
        "--no-reference",
        "--warmup",
        "0",
        "--repeats",
        "1",
        "--json",
        str(out),
    ]
    monkeypatch.setattr(sys, "argv", ["bench_train_step.py", *argv])
    bench_train_step.main()
    assert calls["engine"] == [[12, 12, 12]]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["lengths"] == [12, 12, 12] and row["rollout_tokens"] == 36
