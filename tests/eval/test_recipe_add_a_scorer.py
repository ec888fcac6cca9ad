"""The recipe of docs/extending.md, "Add a scorer", followed with a toy scorer.

The toy is exactly what the recipe says to write: one module in ``sparsectx.eval.scorers`` ending with
``SPECS = (ScorerSpec(...),)`` (here in a folder the package searches after its own, ``scorer_folder``) and one
``bench/<name>.yaml`` naming it (here in a user's ``--config-dir``). No other file is written or edited:
evaluation (the result, each prediction's verdict), the report's bootstrap (its resampling units, the replicates)
and the judge (the undecided answers, the prompt, the verdict, the rescoring) then read the toy's spec as they
read a shipped scorer's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from component_folders import component_folder
from hydra import compose

import sparsectx.eval.scorers as scorers
from sparsectx.cli import config_search
from sparsectx.eval.judge import JudgeAnswersConfig, JudgeConfig, judge_prompt, judge_result, read_verdict, undecided
from sparsectx.eval.protocol import is_correct
from sparsectx.eval.runner import run
from sparsectx.eval.scorers import SCORERS, ScoredItem, register_scorers, score_items
from sparsectx.eval.vlmeval_bridge import _compare, check_columns
from sparsectx.io import read_jsonl
from sparsectx.report.bootstrap import draw_counts, layout, replicates
from sparsectx.report.items import read_items

from .test_runner_support import CONF, SIDE, base_overrides, build_model_dir, write_bench

TOY_MODULE = '''
"""Toy scorer: a yes/no answer counts only when it is the bare word (case and surrounding spaces aside)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sparsectx.eval.scorers.base import ScoredItem, accuracy_metrics
from sparsectx.eval.scorers.spec import ITEM_MEAN, JudgedAnswers, ScorerSpec


def bare_word(text: str | None) -> str | None:
    """Returns "yes" or "no" when ``text`` is that word alone, else None."""
    word = None if text is None else text.strip().lower()
    return word if word in ("yes", "no") else None


def is_bare_correct(item: ScoredItem) -> bool:
    """Returns whether the answer is the gold word alone."""
    return bare_word(item.prediction) == item.reference.strip().lower()


def score_bare(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns the percent of items answered with the gold word alone."""
    correct = [is_bare_correct(item) for item in items]
    unread = sum(item.prediction is not None and bare_word(item.prediction) is None for item in items)
    return accuracy_metrics(items, correct, "unread", unread)


def bare_undecided(item: ScoredItem) -> bool:
    """Returns whether the answer is not a bare yes or no."""
    return bare_word(item.prediction) is None


def bare_verdict(reply: str, options: Mapping[str, str]) -> str | None:
    """Returns the judge's reply as Yes / No, None when it is neither word alone."""
    word = bare_word(reply)
    return None if word is None else word.capitalize()


SPECS = (
    ScorerSpec(
        name="toy_bare_yes_no",
        version=1,
        fn=score_bare,
        is_correct=is_bare_correct,
        resampling=ITEM_MEAN,
        needs=("reference",),
        judge=JudgedAnswers(template="yes_no", undecided=bare_undecided, verdict=bare_verdict),
    ),
)
'''

BENCH_YAML = """\
# @package bench.toy_yn
# Toy yes/no benchmark scored by the toy scorer (tests/eval/test_recipe_add_a_scorer.py).
defaults:
  - /bench_prompt@layout.prompt: project
  - _self_
name: toy_yn
dataset_name: toy_yn
path: data/toy_yn.tsv
scorer: toy_bare_yes_no
max_new_tokens: 4
group_by: none
subset_field: none
layout:
  files: [toy_yn.tsv]
  drop_rows: []
  options: columns
  options_column: ""
  answer: as_is
  gold_column: answer
  source: "the recipe test's own file"
"""

PROMPTS = {"yes_no": "Is {answer} a yes or a no to {question}?", "choice": "unused"}


@pytest.fixture
def scorer_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str], Path]]:
    """Returns ``write(module, source)``, which writes ``<module>.py`` into a folder that ``sparsectx.eval.scorers``
    searches after its own, as if the file were put beside the shipped scorers; then ``register_scorers()`` finds
    it (``component_folder``)."""
    yield from component_folder(tmp_path / "scorer_modules", monkeypatch, scorers, SCORERS)


@pytest.fixture
def toy_scorer(scorer_folder, tmp_path: Path) -> Path:
    """Follows the recipe (the module, the bench YAML) and returns the user's config folder holding the YAML."""
    conf = tmp_path / "my_conf"
    (conf / "bench").mkdir(parents=True)
    scorer_folder("toy_bare", TOY_MODULE)
    (conf / "bench" / "toy_yn.yaml").write_text(BENCH_YAML)
    register_scorers()  # what importing sparsectx.eval.scorers does for the modules beside the shipped ones
    return conf


def items(answers: list[str | None], golds: list[str]) -> list[ScoredItem]:
    """Returns one item per (answer, gold)."""
    pairs = enumerate(zip(answers, golds, strict=True))
    return [ScoredItem(id=str(i), prediction=answer, reference=gold) for i, (answer, gold) in pairs]


def test_the_module_is_found_and_registered(toy_scorer):
    spec = SCORERS.get("toy_bare_yes_no")
    assert (spec.version, spec.judge.template) == (1, "yes_no")
    report = score_items("toy_bare_yes_no", items(["yes", "Yes.", None], ["yes", "yes", "no"]))
    assert (report.scorer, report.scorer_version, report.metrics["score"]) == ("toy_bare_yes_no", 1, 100 / 3)


def test_a_module_without_specs_is_refused_naming_it(scorer_folder):
    path = scorer_folder("toy_forgotten", "def score(items):\n    return {}\n")
    with pytest.raises(TypeError, match=rf"{path}: .* defines no SPECS .*Add a scorer"):
        register_scorers()


def test_every_consumer_reads_the_toys_spec(toy_scorer):
    scored = items(["yes", "Yes, it is", "no", None, " NO "], ["yes", "yes", "yes", "no", "no"])
    assert [is_correct("toy_bare_yes_no", it) for it in scored] == [True, False, False, False, True]
    assert [undecided("toy_bare_yes_no", it) for it in scored] == [False, True, False, False, False]
    assert (
        judge_prompt("toy_bare_yes_no", scored[1], "Is it red?", PROMPTS)
        == "Is Yes, it is a yes or a no to Is it red??"
    )
    assert [read_verdict("toy_bare_yes_no", reply, {}) for reply in ("yes", "No", "Unknown")] == ["Yes", "No", None]
    lay = layout("toy_bare_yes_no", scored)
    assert lay.units == ((0,), (1,), (2,), (3,), (4,)) and lay.strata == ((0, 1, 2, 3, 4),)
    reps = replicates(lay, scored, draw_counts(lay, 50, np.random.default_rng(0)))
    assert reps.shape == (50,) and set(np.round(reps, 6)) <= {0.0, 20.0, 40.0, 60.0, 80.0, 100.0}
    check_columns(Path("toy_yn.tsv"), ["index", "answer"], "toy_bare_yes_no", {})  # no VLMEvalKit reading: no check
    assert _compare("toy_bare_yes_no", None, {}, {"score": 40.0})["score"] is None


@pytest.mark.slow
def test_evaluation_the_bootstrap_and_the_judge_accept_the_toy(toy_scorer, tmp_path):
    model = build_model_dir(tmp_path / "model", "qwen2_5_vl", weights=True)
    data = write_bench(tmp_path / "toy_yn.tsv", "syn_pope", 6, SIDE)
    overrides = ["bench=toy_yn", *base_overrides(model, tmp_path / "results", {"toy_yn": data}, 4), "budget=1.0"]
    with config_search(CONF, toy_scorer, None):
        (out,) = run(compose("evaluate", overrides=overrides))
    payload = json.loads(out.read_text())
    assert (payload["scorer"], payload["scorer_version"], payload["n_scored"]) == ("toy_bare_yes_no", 1, 6)
    rows = read_jsonl(out.parent / "toy_yn.predictions.jsonl")
    golds = {row["id"]: "yes" if int(row["id"]) % 2 == 0 else "no" for row in rows}
    assert [row["correct"] for row in rows] == [
        row["answer"] is not None and row["answer"].strip().lower() == golds[row["id"]] for row in rows
    ]

    records = read_items(out, payload, {})
    lay = layout(records.scorer, records.items, records.headline)
    reps = replicates(lay, records.items, draw_counts(lay, 40, np.random.default_rng(1)))
    assert len(lay.units) == 6 and reps.shape == (40,)

    config = JudgeAnswersConfig(result=str(out), judge=JudgeConfig(backend="hf", model="unused"), prompts=PROMPTS)
    block = judge_result(config, chat=lambda prompt: "Yes")
    undecided_ids = [row["id"] for row in rows if undecided("toy_bare_yes_no", records.items[int(row["id"])])]
    assert block["n_undecided"] == block["n_decided_by_judge"] == len(undecided_ids)
    assert [r["id"] for r in read_jsonl(out.parent / "toy_yn.judge.jsonl")] == undecided_ids
    final = [replace(it, prediction="Yes") if it.id in undecided_ids else it for it in records.items]
    assert block["score"] == score_items("toy_bare_yes_no", final).metrics["score"]
