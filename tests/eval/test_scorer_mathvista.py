"""MathVista's scorer against VLMEvalKit's own rule, ``post_check`` (vlmeval/dataset/utils/mathvista.py), run in
VLMEvalKit's environment on the same rows: a multiple-choice row hit by the letter ``can_infer`` reads over the
``choices`` list against ``answer_option``; integer and float rows by the numbers' equality."""

from __future__ import annotations

import json
import subprocess
import textwrap

from sparsectx.eval.scorers import ScoredItem, score_items
from sparsectx.eval.scorers.mathvista import is_mathvista_correct

from .vlmeval_cases import require_vlmeval_env

CHOICES = ["3/11", "8/11", "6/11", "3/5"]
MC = [
    "B",
    "(B) 8/11",
    "8/11",
    "The answer is B",
    "b",
    "A",
    "B and C",
    "B.",
    " B",
    "None of them",
    "6/11",
]  # answers to "What fraction of the shape is blue?" (gold B = 8/11)
FREE = [
    ("integer", "1000", "1000"),
    ("integer", "1000", "1000.0"),
    ("integer", "1000", "999"),
    ("integer", "1000", "1,000"),
    ("float", "0.6", "0.6"),
    ("float", "0.6", ".6"),
    ("float", "0.6", "0.60"),
    ("float", "0.6", "0.7"),
    ("float", "1.45", "1.45"),
    ("float", "1.45", "$1.45"),
]
"""(answer_type, gold, extracted answer) of free-form rows."""

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from vlmeval.dataset.utils.mathvista import post_check

    out = []
    for line in json.loads(sys.stdin.read()):
        res = post_check(line, prefetch=True)            # MathVista_auxeval's rule, tried before its judge
        hit = bool(res) and post_check({**line, "res": res}, prefetch=False)   # MathVista_acc's hit
        out.append(bool(hit))
    print("HITS" + json.dumps(out))
    """
)


def _lines() -> list[dict[str, str]]:
    """Returns MathVista_MINI rows as VLMEvalKit's evaluation reads them, with the answers as ``prediction``."""
    mc = [
        {
            "question_type": "multi_choice",
            "answer_type": "text",
            "answer": "8/11",
            "answer_option": "B",
            "choices": str(CHOICES),
            "prediction": pred,
        }
        for pred in MC
    ]
    free = [
        {
            "question_type": "free_form",
            "answer_type": kind,
            "answer": gold,
            "answer_option": "",
            "choices": "",
            "prediction": pred,
        }
        for kind, gold, pred in FREE
    ]
    return mc + free


def _item(i: int, line: dict[str, str]) -> ScoredItem:
    """Returns the row as the project scores it: options from ``choices``, gold ``answer_option|answer``."""
    options = dict(zip("ABCD", CHOICES, strict=True)) if line["choices"] else {}
    gold = line["answer_option"] or line["answer"]
    return ScoredItem(id=str(i), prediction=line["prediction"], reference=gold, options=options)


def test_hits_equal_vlmevalkit_post_check_on_multiple_choice_and_numeric_rows() -> None:
    env = require_vlmeval_env()
    lines = _lines()
    done = subprocess.run(
        [str(env / "bin" / "python"), "-c", SCRIPT],
        input=json.dumps(lines),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout.split("HITS")[-1])
    ours = [is_mathvista_correct(_item(i, line)) for i, line in enumerate(lines)]
    assert ours == theirs
    assert sum(ours[: len(MC)]) >= 3  # the letter, "(B) 8/11" and the option's text are right


def test_a_right_letter_scores_and_the_options_text_in_the_answer_cell_does_not_stand_in_for_it() -> None:
    options = dict(zip("ABCD", CHOICES, strict=True))
    right = ScoredItem(id="1", prediction="B", reference="B", options=options)
    wrong = ScoredItem(id="2", prediction="A", reference="B", options=options)
    free = ScoredItem(id="3", prediction="[2007, 2008]", reference="[2007, 2008]")
    metrics = score_items("mathvista", [right, wrong, free]).metrics
    assert metrics["score"] == 100.0 * 2 / 3 and metrics["n"] == 3.0
