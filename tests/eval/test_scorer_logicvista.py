"""LogicVista's scorer: the letters read from an answer against the gold letters, as VLMEvalKit's
``LogicVista_auxeval`` compares them (run in VLMEvalKit's environment, with a stand-in for its judge)."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from sparsectx.eval.scorers import ScoredItem, score_items
from sparsectx.eval.scorers.logicvista import is_logicvista_correct, letter_set

from .vlmeval_cases import require_vlmeval_env

CASES = [
    ("D", "D"),
    ("D", "(D)"),
    ("D", "D."),
    ("D", "d"),
    ("D", "The answer is D"),
    ("D", "B"),
    ("D", None),
    ("A, C", "A, C"),
    ("A, C", "C, A"),
    ("A, C", "AC"),
    ("A, C", "A and C"),
    ("A, C", "A"),
    ("A, C", "A, B, C"),
    ("B, C, E", "E C B"),
    ("B, C, E", "BCE"),
    ("A", "AA"),
]
"""(gold cell, extracted answer): single and several letters, order, separators, words, misses."""


def _item(i: int, gold: str, prediction: str | None) -> ScoredItem:
    return ScoredItem(id=str(i), prediction=prediction, reference=gold)


def test_letters_are_read_only_from_an_answer_made_of_letters() -> None:
    assert [letter_set(text) for text in ("A, C", "C,A", "(B)", "A and C", "b", "The answer is D", "")] == [
        "AC",
        "AC",
        "B",
        "AC",
        None,
        None,
        None,
    ]


def test_the_score_is_the_percent_of_rows_whose_letters_equal_the_gold_set() -> None:
    items = [_item(i, gold, pred) for i, (gold, pred) in enumerate(CASES)]
    metrics = score_items("logicvista", items).metrics
    hits = sum(is_logicvista_correct(item) for item in items)
    assert hits == 9
    assert metrics["score"] == pytest.approx(100.0 * 9 / len(CASES))
    assert metrics["missing"] == 1.0
    assert metrics["unread"] == 2.0  # "d" and "The answer is D"


def test_a_gold_cell_that_is_not_letters_is_refused_naming_the_item() -> None:
    with pytest.raises(ValueError, match="item '0'.*'42'"):
        score_items("logicvista", [_item(0, "42", "42")])


SCRIPT = textwrap.dedent(
    """
    import json, sys
    from vlmeval.dataset.utils.logicvista import LogicVista_auxeval

    class Judge:  # stands in for the LLM judge: returns the letters the project read
        def __init__(self, res):
            self.res = res
        def generate(self, prompt, temperature=0):
            return self.res

    out = []
    for gold, prediction, res in json.loads(sys.stdin.read()):
        line = {"question": "Which?", "prediction": prediction, "answer": gold}
        out.append(LogicVista_auxeval(Judge(res), line)["hit"])
    print("HITS" + json.dumps(out))
    """
)


def test_hits_equal_vlmevalkit_logicvista_auxeval_given_the_same_letters() -> None:
    """VLMEvalKit's judge answers in upper-case letters (anything else is a miss); given the letters the
    project read (or the raw answer when it read none), ``LogicVista_auxeval``'s hit equals ours."""
    env = require_vlmeval_env()
    jobs = [(gold, str(pred), letter_set(pred) or str(pred)) for gold, pred in CASES]
    done = subprocess.run(
        [str(env / "bin" / "python"), "-c", SCRIPT],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout.split("HITS")[-1])
    ours = [int(is_logicvista_correct(_item(i, gold, pred))) for i, (gold, pred) in enumerate(CASES)]
    assert ours == theirs
