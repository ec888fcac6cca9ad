"""MME-RealWorld's scorer against VLMEvalKit's own: ``extract_characters_regex`` on every prediction and
``get_dimension_rating``'s ``Overall`` and per-task figures, run in VLMEvalKit's environment (skipped, naming
``make vlmeval-env``, where it is absent). The generic multiple-choice reader disagrees with it on these
answers, which is why the benchmark has its own scorer."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from sparsectx.eval.scorers import ScoredItem, score_items, vlmeval_choice
from sparsectx.eval.scorers.mme_realworld import is_mme_realworld_correct, mme_realworld_choice

from .vlmeval_cases import require_vlmeval_env

OPTIONS = {"A": "1", "B": "2", "C": "3", "D": "4", "E": "none"}
PREDICTIONS = [
    "A",
    "(B)",
    "The best answer is C",
    "The answer is (D).",
    "Based on the image, the answer is C",
    "c",
    "",
    "d)",
    "The best option isThe correct option is E",
    "The best option is E",
    "Best answer: A",
    "there are two cars parked on the left side of the busy street near the shop",
    "E. none",
    "none",
    "I think it is 3",
    "option b",
    "Answer: B",
    "**D**",
]
"""Letters, parenthesised, prefixed, a sentence whose first capital A-E is not the answer, lower case, empty,
the joined prefixes of VLMEvalKit's list, a long text without a capital A-E, option text."""
CATEGORIES = ["Perception/Monitoring", "Perception/Remote Sensing", "Reasoning/Autonomous_Driving"]
GOLDS = "ABCDE"


def _items() -> list[ScoredItem]:
    return [
        ScoredItem(id=str(i), prediction=p, reference=GOLDS[i % 5], options=OPTIONS, category=CATEGORIES[i % 3])
        for i, p in enumerate(PREDICTIONS)
    ]


def test_the_rule_reads_letters_as_vlmeval_writes_it() -> None:
    assert [mme_realworld_choice(p) for p in ("Based on it, A", "", "c", "option b", None)] == ["B", "A", "C", "", ""]
    assert not is_mme_realworld_correct(ScoredItem(id="0", prediction=None, reference="A"))


def test_the_generic_reader_disagrees_on_some_answers() -> None:
    items = _items()
    assert any(
        is_mme_realworld_correct(it) != (vlmeval_choice(it.prediction, it.options) == it.reference) for it in items
    )


@pytest.mark.slow
def test_vlmeval_reads_and_rates_the_answers_alike(tmp_path: Path) -> None:
    env = require_vlmeval_env()
    items = _items()
    score = tmp_path / "score.tsv"
    rows = ["index\tcategory\tl2-category\tanswer\tprediction"]
    rows += [f"{it.id}\t{it.category}\tcount\t{it.reference}\t{it.prediction}" for it in items]
    score.write_text("\n".join(rows) + "\n")
    script = textwrap.dedent(
        f"""
        import json, sys
        import pandas as pd
        from vlmeval.dataset.utils.multiple_choice import extract_characters_regex, get_dimension_rating
        data = pd.read_csv({str(score)!r}, sep="\\t", dtype=str, keep_default_na=False)
        data["score"] = [int(extract_characters_regex(p) == a) for p, a in zip(data["prediction"], data["answer"])]
        data.to_csv({str(tmp_path / "scored.tsv")!r}, sep="\\t", index=False)
        json.dump({{"read": [extract_characters_regex(p) for p in data["prediction"]],
                    "rating": get_dimension_rating({str(tmp_path / "scored.tsv")!r})}}, sys.stdout)
        """
    )
    done = subprocess.run([str(env / "bin" / "python"), "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    assert [mme_realworld_choice(it.prediction) for it in items] == theirs["read"]
    metrics = score_items("mme_realworld", items).metrics
    assert metrics["score"] == pytest.approx(100.0 * theirs["rating"]["Overall"])
    for task in ("Perception", "Reasoning"):
        assert metrics[f"task/{task}"] == pytest.approx(100.0 * theirs["rating"][task]["Avg"])
    assert metrics["category/Perception/Monitoring"] == pytest.approx(
        100.0 * theirs["rating"]["Perception"]["Monitoring"]["Avg"]
    )
    assert 0 < metrics["score"] < 100
