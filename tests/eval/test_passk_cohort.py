"""Pass@K cohort protocols: SCOPD App. A's numeric rule on files in the benchmarks' real layouts, its pooling,
and the cohort name check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sparsectx.data import Item, write_tsv
from sparsectx.engine import DecodeEngine
from sparsectx.eval.config import compose_bench, load_eval_config
from sparsectx.eval.passk_cohort import is_plain_number, numeric_items, pool_passk, split_inline_options
from sparsectx.eval.protocol import load_bench_items, sample_id
from sparsectx.eval.runner import run
from sparsectx.generation import Generation
from sparsectx.rehearsal.benchmarks.image_mcq import lettered as _lettered

from .test_runner_support import SIDE, _png, base_overrides, build_model_dir, compose_eval, write_bench
from .vlmeval_cases import png_b64
from .vlmeval_cases import write_tsv as write_rows


def _mcq(index: int, question: str, options: list[str], gold: str, letters: str = "ABCD", **extra: str) -> dict:
    """Returns one row ``index, question, <letters>, answer, category, image`` (+ ``extra``)."""
    return {
        "index": str(index),
        "question": question,
        **_lettered(options, letters),
        "answer": gold,
        "category": "c",
        "image": png_b64(index + 1),
        **extra,
    }


def _mmstar() -> list[dict]:
    """MMStar.tsv: the options in A-D and again inline in the question (``\\nOptions: A: x, B: y``)."""
    return [
        _mcq(0, "How many apples are on the table?\nOptions: A: 3, B: 4, C: 5, D: 6", ["3", "4", "5", "6"], "B"),
        _mcq(1, "Which option shows the count?\nOptions: A: 1, B: 2, C: 3, D: 4", ["1", "2", "3", "4"], "A"),
        _mcq(
            2,
            "What is the main topic?\nOptions: A: sport, B: food, C: travel, D: music",
            ["sport", "food", "travel", "music"],
            "A",
        ),
        _mcq(
            3,
            "How long is the bar?\nOptions: A: 2.5, B: 3, C: 1,000, D: about 4",
            ["2.5", "3", "1,000", "about 4"],
            "C",
        ),
        _mcq(4, "What is the total price?\nOptions: A: 1,250.5, B: 12, C: -3, D: 0", ["1,250.5", "12", "-3", "0"], "A"),
    ]


def _cvbench() -> list[list[dict]]:
    """CV-Bench-2D.tsv and CV-Bench-3D.tsv: a ``question`` cell and the full ``prompt`` cell."""

    def row(index: int, question: str, options: list[str], gold: str, split: str) -> dict:
        lines = "".join(f"\n({letter}) {text}" for letter, text in zip("ABCD", options, strict=False))
        prompt = f"{question} Select from the following choices.{lines}"
        return _mcq(index, question, options, gold, prompt=prompt, split=split, source="COCO")

    two_d = [
        row(0, "How many chairs are in the image?", ["3", "2", "1", "0"], "B", "2D"),
        row(1, "Where is the lamp located with respect to the bed?", ["left", "right"], "A", "2D"),
    ]
    return [two_d, [row(0, "Which is closer to the camera, the table or the sofa?", ["table", "sofa"], "B", "3D")]]


def _blink() -> list[dict]:
    """BLINK.tsv: two- and four-option rows, ``image_path`` on every row."""
    rows = [
        _mcq(0, "How many blue floats are there?", ["0", "1", "2", "3"], "D"),
        _mcq(1, "Which point is closer to the camera?", ["A is closer", "B is closer"], "B"),
    ]
    for i, row in enumerate(rows):
        row["image_path"] = f"{i}.jpg"
    return rows


def _logicvista() -> list[dict]:
    """LogicVista.tsv: no option columns; the options, when any, inline in the question; letter golds."""
    rows = [
        ("What is the next number in the sequence 2, 4, 8, 16? Choices: A. 24 B. 32 C. 30 D. 20", "B"),
        ("Which of the boxes comes next in the sequence? Select from A-E", "D"),
        ("Which two figures are rotations of the object? Choices: A. left B. middle C. right", "A, C"),
        ("How many sides does the shape have? (A) 5 (B) 6 (C) 7 (D) 8", "C"),
    ]
    return [
        {"index": str(i), "image": png_b64(110 + i), "question": q, "answer": gold, "skill": "inductive"}
        for i, (q, gold) in enumerate(rows)
    ]


def _mmmu_pro() -> list[dict]:
    """MMMU_Pro_10c.tsv: up to ten options A-J, ``<image k>`` tags, ``image_path`` and ``id``."""
    letters = "ABCDEFGHIJ"
    rows = [
        _mcq(0, "<image 1> What is the angle x in degrees?", [str(v) for v in range(10, 20)], "F", letters),
        _mcq(1, "<image 1> What is the value of x?", [f"x = {v}" for v in range(10, 20)], "F", letters),
    ]
    for i, row in enumerate(rows):
        row.update(image_path=f"{i}.jpg", id=f"validation_Math_{i}")
    return rows


def _mmmu() -> list[dict]:
    """MMMU_DEV_VAL.tsv: a multiple-choice row and an open row (every option cell empty, the gold as written)."""
    letters = "ABCDEFGHI"
    rows = [
        _mcq(0, "<image 1> What is the style of this painting?", ["Baroque", "Cubism"], "B", letters),
        _mcq(1, "Compute the determinant of the matrix in <image 1>.", [], "42", letters),
        _mcq(2, "Name the theorem shown in <image 1>.", [], "Pythagoras", letters),
    ]
    for i, row in enumerate(rows):
        row.update(image_path=f"{i}.jpg", split="validation", id=f"validation_Math_{i}")
    return rows


FILES = {
    "mmstar": [_mmstar()],
    "cvbench": _cvbench(),
    "blink": [_blink()],
    "logicvista": [_logicvista()],
    "mmmu_pro": [_mmmu_pro()],
    "mmmu": [_mmmu()],
}
"""Benchmark -> the rows of each of its files, in the real file's layout."""

EXPECTED = {
    "mmstar": {"0": ("How many apples are on the table?", "4"), "4": ("What is the total price?", "1,250.5")},
    "cvbench": {"0": ("How many chairs are in the image?", "2")},
    "blink": {"0": ("How many blue floats are there?", "3")},
    "logicvista": {
        "0": ("What is the next number in the sequence 2, 4, 8, 16?", "32"),
        "3": ("How many sides does the shape have?", "7"),
    },
    "mmmu_pro": {"0": ("<image 1> What is the angle x in degrees?", "15")},
    "mmmu": {"1": ("Compute the determinant of the matrix in <image 1>.", "42")},
}
"""Benchmark -> sample id -> (question asked, gold), written out by hand from the rows above and the rule."""


@pytest.mark.parametrize("name", sorted(FILES))
def test_numeric_rule_on_real_layouts(name: str, tmp_path: Path) -> None:
    files = compose_bench(name).layout.files
    for file, rows in zip(files, FILES[name], strict=True):
        write_rows(tmp_path / file, rows)
    spec = compose_bench(name, [f"bench.{name}.path={tmp_path}"])
    items = load_bench_items(spec, 0.0).items
    kept, counts = numeric_items(items)
    got = {sample_id(item): (item.question, item.answer) for item in kept}
    assert got == EXPECTED[name]
    assert all(item.options == {} for item in kept)
    assert counts["rows"] == len(items) and counts["qualified"] == len(EXPECTED[name])
    assert counts["free_form"] == (1 if name == "mmmu" else 0)


def test_plain_numbers_and_inline_options() -> None:
    plain = ["12", "-3", "0.5", "1,000", "2,500.75", " 7 "]
    assert all(is_plain_number(x) for x in plain)
    assert not any(is_plain_number(x) for x in ["1,00", "5 cm", "1/2", "50%", "3.", ".5", "", "three"])
    assert split_inline_options("How many? Choices: A. 3 B. 1,000 C) 5 (D) 7.5") == (
        "How many?",
        {"A": "3", "B": "1,000", "C": "5", "D": "7.5"},
    )
    assert split_inline_options("Which comes next? Select from A-E") == ("Which comes next? Select from A-E", {})


def _summary(n_items: int, greedy: float, p1: float, p4: float, hit: float, mean: float) -> dict:
    return {
        "n_items": n_items,
        "greedy_accuracy": greedy,
        "pass_at_k": {"1": p1, "4": p4},
        "hit_at_least": {"4": hit},
        "mean_correct_samples": mean,
    }


def _source(bench: str, size: int, sparse: dict | None, control: dict | None) -> dict:
    cohort = {"protocol": "paper_numeric", "rule": "r", "size": size, "counts": {"rows": 10}, "ids": []}
    return {"benchmark": bench, "n": 4, "k": [1, 2, 4], "cohort": cohort, "sparse": sparse, "no_image": control}


def test_pooling_weights_each_source_by_its_items() -> None:
    a = _source("mmstar", 1, _summary(1, 100.0, 100.0, 100.0, 100.0, 4.0), _summary(1, 0.0, 0.0, 0.0, 0.0, 0.0))
    b = _source("cvbench", 3, _summary(3, 0.0, 20.0, 60.0, 0.0, 1.0), None)
    pooled = pool_passk([a, b])
    assert pooled["size"] == 4 and pooled["sources"] == {
        "mmstar": {"rows": 10, "size": 1},
        "cvbench": {"rows": 10, "size": 3},
    }
    assert pooled["sparse"] == {
        "n_items": 4,
        "greedy_accuracy": 25.0,
        "pass_at_k": {"1": 40.0, "4": 70.0},
        "hit_at_least": {"4": 25.0},
        "mean_correct_samples": 1.75,
    }
    assert pooled["no_image"]["n_items"] == 1 and pooled["no_image"]["pass_at_k"]["4"] == 0.0
    with pytest.raises(ValueError, match="differ"):
        pool_passk([a, {**b, "n": 8}])


def test_unknown_cohort_name_is_a_config_error() -> None:
    with pytest.raises(ValueError, match=r"passk.cohort='paper'.*paper_numeric.*authors_code"):
        load_eval_config(compose_eval(["passk.cohort=paper"]))
    with pytest.raises(ValueError, match="passk.source_caps.mmstar=0"):
        load_eval_config(compose_eval(["passk.source_caps.mmstar=0"]))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("model"), "qwen2_5_vl", weights=True)


def _numeric_mcq(path: Path) -> Path:
    """Writes three multiple-choice rows whose options are numbers (asked without them under paper_numeric)."""
    options = {"A": "1", "B": "2", "C": "3", "D": "4"}
    items = [
        Item(
            index=i,
            image_bytes=_png(i, SIDE),
            question="How many stars are there?",
            options=options,
            answer="C",
            category="count",
            family="",
            subset="",
            trace="",
            scene="",
            extra={},
        )
        for i in range(3)
    ]
    write_tsv(path, items)
    return path


def test_paper_numeric_pools_sources_with_caps(model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """Scripted answers: "3" with the image (every gold here is 3), "7" without; syn_count capped at 2 of 4."""
    calls = []

    def fake(engine, prompts, cfg, generator=None, slots=None, on_finish=None):
        batch = prompts.build(range(len(prompts)))
        with_image = bool(batch.kept_visual.sum())
        calls.append((len(prompts), with_image, cfg.do_sample))
        text = "<answer>3</answer>" if with_image else "<answer>7</answer>"
        return [Generation(torch.tensor([1]), text, True) for _ in range(batch.inputs.embeds.shape[0])]

    monkeypatch.setattr(DecodeEngine, "generate", fake)
    benches = {
        "syn_count": write_bench(tmp_path / "syn_count.tsv", "syn_count", 4, SIDE),
        "syn_mcq": _numeric_mcq(tmp_path / "syn_mcq.tsv"),
        "syn_pope": write_bench(tmp_path / "syn_pope.tsv", "syn_pope", 3, SIDE),
    }
    overrides = [
        "bench=[syn_count,syn_mcq,syn_pope]",
        "mode=passk",
        "budget=0.25",
        "passk.n=4",
        "passk.sample_batch=4",
        "passk.max_new_tokens=4",
        "passk.hit_m=[1,4]",
        "passk.cohort=paper_numeric",
        "+passk.source_caps.syn_count=2",
        *base_overrides(model_dir, tmp_path / "results", benches, 4),
    ]
    outs = run(compose_eval(overrides))
    assert [p.name for p in outs] == [
        "syn_count.passk.json",
        "syn_mcq.passk.json",
        "syn_pope.passk.json",
        "passk_pool.json",
    ]
    count, mcq, pope = (json.loads(p.read_text()) for p in outs[:3])
    assert count["cohort"]["protocol"] == "paper_numeric" and count["scorer"] == "number_match"
    assert count["cohort"]["counts"] == {
        "rows": 4,
        "free_form": 4,
        "options_removed": 0,
        "qualified": 4,
        "checked": 4,
        "solved": 4,
        "cap": 2,
        "size": 2,
    }
    assert len(count["cohort"]["ids"]) == 2 and count["cohort"]["ids"] == sorted(count["cohort"]["ids"])
    assert mcq["cohort"]["counts"]["options_removed"] == 3 and mcq["cohort"]["ids"] == ["0", "1", "2"]
    assert mcq["sparse"]["greedy_accuracy"] == 100.0  # "3" is the gold option's text, scored as a number
    assert pope["cohort"]["counts"]["qualified"] == 0 and pope["sparse"] is None
    pool = json.loads(outs[3].read_text())
    assert pool["size"] == 5 and set(pool["sources"]) == {"syn_count", "syn_mcq", "syn_pope"}
    assert pool["sparse"]["pass_at_k"]["4"] == 100.0 and pool["no_image"]["pass_at_k"]["4"] == 0.0
    assert calls[0] == (4, True, False)  # the full-context greedy pass over syn_count's 4 qualifying rows
