"""``mode=passk``: one fixed sparse context per item, n draws, pass@k / Hit>=m@n and the no-image control."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sparsectx.engine import DecodeEngine
from sparsectx.eval.runner import run
from sparsectx.generation import Generation
from sparsectx.io import append_jsonl, read_jsonl

from .test_runner_support import SIDE, base_overrides, build_model_dir, compose_eval, write_bench

PASSK = [
    "mode=passk",
    "budget=0.25",
    "passk.n=4",
    "passk.sample_batch=3",
    "passk.max_new_tokens=4",
    "passk.hit_m=[1,3]",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("model"), "qwen2_5_vl", weights=True)


def _cfg(model_dir: Path, tmp: Path, *extra: str):
    bench = {"syn_count": write_bench(tmp / "syn_count.tsv", "syn_count", 3, SIDE)}
    return compose_eval(["bench=syn_count", *PASSK, *base_overrides(model_dir, tmp / "results", bench, 4), *extra])


def test_passk_on_a_tiny_model_writes_its_json(model_dir, tmp_path):
    full_leaf = tmp_path / "full"
    rows = [{"id": str(i), "correct": i != 1} for i in range(3)]  # the full-context model solved items 0 and 2
    append_jsonl(full_leaf / "syn_count.predictions.jsonl", rows)
    out = run(_cfg(model_dir, tmp_path, f"passk.full_context_leaf={full_leaf}"))[0]
    assert out.name == "syn_count.passk.json"
    payload = json.loads(out.read_text())
    assert payload["cohort"]["ids"] == ["0", "2"] and payload["k"] == [1, 2, 4]
    for condition in ("sparse", "no_image"):
        summary = payload[condition]
        assert summary["n_items"] == 2 and set(summary["pass_at_k"]) == {"1", "2", "4"}
        assert set(summary["hit_at_least"]) == {"1", "3"}
    draws = read_jsonl(out.with_name("syn_count.passk.samples.jsonl"))
    assert [(d["id"], d["condition"]) for d in draws] == [
        ("0", "sparse"),
        ("0", "no_image"),
        ("2", "sparse"),
        ("2", "no_image"),
    ]
    assert all(len(d["samples"]) == 4 for d in draws)
    sparse = draws[0]
    assert len(sparse["kept_indices"]) == 1 and len(sparse["kept_indices"][0]) == 4  # 25% of 16, once
    assert draws[1]["kept_indices"] == []
    stamp = out.stat().st_mtime_ns
    run(_cfg(model_dir, tmp_path, f"passk.full_context_leaf={full_leaf}"))
    assert out.stat().st_mtime_ns == stamp  # finished: skipped


def test_pass_at_k_counts_correct_draws_from_one_context(model_dir, tmp_path, monkeypatch):
    """Scripted draws: greedy right with the image, alternate samples right, the control always wrong."""
    contexts = []

    def fake(engine, prompts, cfg, generator=None, slots=None, on_finish=None):
        batch = prompts.build(range(len(prompts)))
        size, with_image = batch.inputs.embeds.shape[0], bool(batch.kept_visual.sum())
        contexts.append((batch.inputs.embeds[0].clone(), with_image))
        if not with_image:
            texts = ["<answer>7</answer>"] * size
        elif not cfg.do_sample:
            texts = ["<answer>3</answer>"] * size
        else:
            texts = ["<answer>5</answer>" if i == 1 else "<answer>3</answer>" for i in range(size)]
        return [Generation(torch.tensor([1]), text, True) for text in texts]

    monkeypatch.setattr(DecodeEngine, "generate", fake)
    payload = json.loads(run(_cfg(model_dir, tmp_path))[0].read_text())  # cohort computed: all solved
    cohort = payload["cohort"]
    assert (cohort["protocol"], cohort["size"], cohort["ids"]) == ("authors_code", 3, ["0", "1", "2"])
    assert cohort["source"] == "computed: full-context greedy pass" and cohort["rule"].startswith("the authors' code")
    assert cohort["counts"] == {"rows": 3, "solved": 3, "cap": 12, "size": 3}  # model=tiny: max_items 12
    sparse, control = payload["sparse"], payload["no_image"]
    assert sparse["greedy_accuracy"] == 100.0 and control["greedy_accuracy"] == 0.0
    assert sparse["mean_correct_samples"] == 3.0  # one engine call of 4 draws: right, wrong, right, right
    assert sparse["pass_at_k"]["1"] == pytest.approx(75.0) and sparse["pass_at_k"]["4"] == 100.0
    assert sparse["hit_at_least"] == {"1": 100.0, "3": 100.0}
    assert control["pass_at_k"]["4"] == 0.0 and payload["gap"] == 0.0
    sparse_calls = [embeds for embeds, with_image in contexts[1:] if with_image]  # after the cohort batch
    first_item = sparse_calls[:2]  # item 0's greedy run and its sampling call share one context
    assert all(torch.equal(e, first_item[0]) for e in first_item)


def test_draws_are_judged_from_the_answer_prefix_on(model_dir, tmp_path, monkeypatch):
    """With ``model.answer_prefix`` the prompt pre-fills ``<answer>``: each draw is judged (and recorded) as the
    prefix followed by the generated text, as the benchmarks judge it, so ``3</answer>`` reads as tagged."""

    def fake(engine, prompts, cfg, generator=None, slots=None, on_finish=None):
        return [Generation(torch.tensor([1]), "3</answer>", True) for _ in range(len(prompts))]

    monkeypatch.setattr(DecodeEngine, "generate", fake)
    out = run(_cfg(model_dir, tmp_path, "model.answer_prefix='<answer>'"))[0]
    for draw in read_jsonl(out.with_name("syn_count.passk.samples.jsonl")):
        for judged in (draw["greedy"], *draw["samples"]):
            assert (judged["text"], judged["status"], judged["answer"]) == ("<answer>3</answer>", "tagged", "3")


def test_an_item_too_long_for_the_cache_is_a_counted_row_not_an_abort(model_dir, tmp_path):
    """A cohort item whose prompt plus ``passk.max_new_tokens`` exceeds ``engine.max_length`` is recorded as not
    drawn (both conditions, with why) and left out of the summaries; the other items are drawn as usual."""
    import csv

    bench = write_bench(tmp_path / "syn_count.tsv", "syn_count", 3, SIDE)
    with bench.open(newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    rows[1]["question"] += " Count them carefully, one at a time." * 40  # row 1 alone no longer fits
    with bench.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(rows)
    full_leaf = tmp_path / "full"
    append_jsonl(full_leaf / "syn_count.predictions.jsonl", [{"id": str(i), "correct": True} for i in range(3)])
    overrides = [*PASSK, *base_overrides(model_dir, tmp_path / "results", {"syn_count": bench}, 4)]
    extra = [f"passk.full_context_leaf={full_leaf}", "engine.max_length=300"]
    out = run(compose_eval(["bench=syn_count", *overrides, *extra]))[0]
    payload = json.loads(out.read_text())
    assert [(row["id"], row["condition"]) for row in payload["not_drawn"]] == [("1", "sparse"), ("1", "no_image")]
    assert all("engine.max_length=300" in row["error"] for row in payload["not_drawn"])
    assert payload["sparse"]["n_items"] == payload["no_image"]["n_items"] == 2
