"""The video benchmarks' scorers against VLMEvalKit's own ``evaluate`` (``model='exact_matching'``), run in its
environment (skipped, naming ``make vlmeval-env``, where it is absent): ``MVBench``, ``MLVU_MCQ``, ``VideoMME`` and
``TempCompass_MCQ`` of nvidia-vlmeval 26.3 score a prediction file of edge-case answers (many per row, several
rows with different golds), and the project's per-item rule must agree with every row of VLMEvalKit's score file
and its headline with VLMEvalKit's rating. Video-TT's class is not in 26.3: its rule, upstream utils/videott.py
``extract_characters_regex``, is the same text as utils/videomme.py's, which the Video-TT test runs.

The generic multiple-choice reader (``mcq_vlmeval``) disagrees with each rule on some of these answers, which is
why each benchmark has its own scorer.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from sparsectx.eval.protocol import is_correct
from sparsectx.eval.scorers import ScoredItem, score_items, vlmeval_choice

from .vlmeval_cases import require_vlmeval_env

CANDIDATES = (
    (["cat", "dog", "bird", "a dog and a cat"], "dog"),
    (["Pushing something from left to right", "Not sure", "Pushing something from right to left"], "Not sure"),
    (["red", "green", "blue", "yellow"], "yellow"),
)
"""(candidates, answer text) of the MVBench/MLVU rows: golds B, B and D."""
MC_PREDICTIONS = [
    "B",
    "b",
    "(B)",
    "(B) dog",
    "B) dog",
    "B.",
    "b.",
    "(b",
    "B dog",
    " B",
    "B\n",
    "Answer: B",
    "The answer is B.",
    "I think it is (B)",
    "(B)dog",
    "answer:(b)",
    "dog",
    "Dog.",
    "a dog",
    "the cat or the dog",
    "A or B",
    "C",
    "(C) bird",
    "Option B",
    ")",
    "(",
    ".",
    "...",
    "E",
    "Z",
    "none of them",
    "Cannot determine the answer",
    "B is right because A is wrong",
    "After watching the whole video carefully the best choice here is B",
    "B is the right one since the video clearly shows the animal running across the yard",
    "1",
    "B)",
    "(A) cat (B) dog",
    "A) B)",
    "Best option:(B) dog",
    "B. dog",
    "b) dog",
    "A\nB",
    "\n(B)",
    "D",
    "(D)",
    "yellow",
    "D. yellow",
    "It is not sure",
    "not sure",
    "(d) Yellow",
    "d",
]
"""Answers on the MVBench/MLVU rules' edge cases: case, the first word, ")" positions, text, refusals, long answers.
VLMEvalKit's API-failure text is left out: its evaluate scores it -1, which MVBench's rating counts as a hit and
MLVU's as minus one hit; the project scores it by the rule (module docstrings)."""


def _run(env: Path, script: str) -> dict:
    done = subprocess.run([str(env / "bin" / "python"), "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _evaluate(env: Path, tmp_path: Path, dataset: str, rows: list[dict], **kwargs: object) -> dict:
    """Returns VLMEvalKit's ``{"scores": [per row], "rating": ...}`` after ``<dataset>.evaluate`` on ``rows``."""
    data = tmp_path / "rows.json"
    data.write_text(json.dumps(rows))
    module, name = dataset.rsplit(".", 1)
    script = textwrap.dedent(
        f"""
        import glob, json, math, sys
        import pandas as pd
        from vlmeval.smp import dump, load
        from {module} import {name}
        frame = pd.DataFrame(json.load(open({str(data)!r})))
        eval_file = {str(tmp_path / "preds.xlsx")!r}
        dump(frame, eval_file)
        rating = {name}.evaluate(eval_file, model="exact_matching", **{kwargs!r})
        scored = load(glob.glob({str(tmp_path / "preds*score.xlsx")!r})[0])
        scores = [None if isinstance(s, float) and math.isnan(s) else int(s) for s in scored["score"]]
        json.dump({{"scores": scores, "rating": rating}}, sys.stdout, default=str)
        """
    )
    return _run(env, script)


def _letter(candidates: list[str], text: str) -> str:
    return "ABCDEFGH"[candidates.index(text)]


def _mc_items() -> tuple[list[ScoredItem], list[dict]]:
    """Returns the MVBench/MLVU items (every prediction on every row) and their prediction-file rows."""
    items, rows = [], []
    for candidates, answer in CANDIDATES:
        for prediction in MC_PREDICTIONS:
            i = len(items)
            items.append(
                ScoredItem(
                    id=str(i),
                    prediction=prediction,
                    reference=_letter(candidates, answer),
                    options=dict(zip("ABCDEFGH", candidates, strict=False)),
                )
            )
            rows.append(
                {
                    "index": i,
                    "task_type": f"task{i % 3}",
                    "question": "What happens?",
                    "answer": answer,
                    "candidates": str(candidates),
                    "prediction": prediction,
                }
            )
    return items, rows


def _disagrees_with_generic(scorer: str, items: list[ScoredItem]) -> bool:
    return any(is_correct(scorer, it) != (vlmeval_choice(it.prediction, it.options) == it.reference) for it in items)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("scorer", "dataset"), [("mvbench", "vlmeval.dataset.mvbench.MVBench"), ("mlvu", "vlmeval.dataset.mlvu.MLVU_MCQ")]
)
def test_mvbench_and_mlvu_agree_with_vlmeval_row_by_row(scorer: str, dataset: str, tmp_path: Path) -> None:
    env = require_vlmeval_env()
    items, rows = _mc_items()
    theirs = _evaluate(env, tmp_path, dataset, rows)
    mine = [is_correct(scorer, item) for item in items]
    assert [bool(s) for s in theirs["scores"]] == mine
    assert 0 < sum(mine) < len(mine)
    assert _disagrees_with_generic(scorer, items)
    score = score_items(scorer, items).metrics["score"]
    if scorer == "mvbench":  # get_dimension_rating: overall = [hits, rows, "xx.xx%"]
        hits, total, _ = theirs["rating"]["overall"]
    else:  # MLVU_MCQ: [hits, rows] per task; MLVU's M-Avg pools them
        hits, total = (sum(v[k] for v in theirs["rating"].values()) for k in (0, 1))
    assert total == len(items)
    assert score == pytest.approx(100.0 * hits / total)


@pytest.mark.slow
def test_mvbench_counts_an_empty_answer_as_vlmeval_does(tmp_path: Path) -> None:
    """An empty prediction becomes NaN in VLMEvalKit's .xlsx: the row is skipped and its unset score (NaN,
    truthy) is counted right by get_dimension_rating; the rule itself ("" is a substring of "(b)") agrees."""
    env = require_vlmeval_env()
    items, rows = _mc_items()
    items, rows = items[:2], rows[:2]
    items[0] = ScoredItem(id="0", prediction="", reference="B", options=items[0].options)
    rows[0]["prediction"] = ""
    items[1] = ScoredItem(id="1", prediction="A", reference="B", options=items[1].options)
    rows[1]["prediction"] = "A"
    theirs = _evaluate(env, tmp_path, "vlmeval.dataset.mvbench.MVBench", rows)
    assert theirs["scores"] == [None, 0]
    assert theirs["rating"]["overall"][:2] == [1, 2]
    assert [is_correct("mvbench", it) for it in items] == [True, False]
    assert not is_correct("mvbench", ScoredItem(id="2", prediction=None, reference="B", options=items[0].options))


VIDEOMME_PREDICTIONS = [
    "A",
    "(B)",
    "The best answer is C",
    "The answer is (D).",
    "Based on the video, the answer is C",
    "c",
    "",
    "d)",
    "The best option isThe correct option is D",
    "The best option is D",
    "Best answer: A",
    "Answer: B",
    "Option: C",
    "Answer:D",
    "E",
    "E. none",
    "the man runs to the left side of the street to catch the red bus",
    "I think it is the second one",
    "**D**",
    "Correct answer: B",
    "The correct answer is B",
    "none",
    "The Answer is A",
    "A person",
    "answer: b",
    "Option C",
    "  C  ",
    "\nD\n",
]
"""Answers on extract_characters_regex's edge cases: answer phrases (joined pairs), capitals in words, E, long text."""
VIDEOMME_OPTIONS = {"A": "Apples.", "B": "Candles.", "C": "Berries.", "D": "The same number."}


def _videomme_items() -> tuple[list[ScoredItem], list[dict]]:
    items, rows = [], []
    for gold in "ABCD":
        for prediction in VIDEOMME_PREDICTIONS:
            i = len(items)
            items.append(ScoredItem(id=str(i), prediction=prediction, reference=gold, options=VIDEOMME_OPTIONS))
            rows.append(
                {
                    "index": i,
                    "video": f"v{i}",
                    "duration": ("short", "medium", "long")[i % 3],
                    "domain": "Knowledge",
                    "sub_category": "Humanity & History",
                    "task_type": "Counting Problem",
                    "question": "Which kind of decoration has the largest number?",
                    "candidates": str([f"{k}. {v}" for k, v in VIDEOMME_OPTIONS.items()]),
                    "answer": gold,
                    "prediction": prediction,
                }
            )
    return items, rows


@pytest.mark.slow
def test_videomme_agrees_with_vlmeval_row_by_row(tmp_path: Path) -> None:
    env = require_vlmeval_env()
    items, rows = _videomme_items()
    theirs = _evaluate(env, tmp_path, "vlmeval.dataset.videomme.VideoMME", rows)
    mine = [is_correct("videomme", item) for item in items]
    assert [bool(s) for s in theirs["scores"]] == mine
    assert 0 < sum(mine) < len(mine)
    assert _disagrees_with_generic("videomme", items)
    score = score_items("videomme", items).metrics["score"]
    assert score == pytest.approx(100.0 * float(theirs["rating"]["overall"]["overall"]), abs=0.05)  # 3 decimals


@pytest.mark.slow
def test_video_tt_reads_as_the_extraction_rule_it_shares(tmp_path: Path) -> None:
    env = require_vlmeval_env()
    items, _ = _videomme_items()
    script = textwrap.dedent(
        f"""
        import json, sys
        from vlmeval.dataset.utils.videomme import extract_characters_regex
        json.dump([extract_characters_regex(p) for p in {VIDEOMME_PREDICTIONS!r}], sys.stdout)
        """
    )
    read = dict(zip(VIDEOMME_PREDICTIONS, _run(env, script), strict=True))
    assert [is_correct("video_tt", it) for it in items] == [read[it.prediction] == it.reference for it in items]
    assert score_items("video_tt", items).metrics["score"] == score_items("videomme", items).metrics["score"]


MULTI_CHOICE = {"A": "from left to right", "B": "from right to left", "C": "towards the camera"}
CAPTIONS = (
    ["Caption A: The man dribbles the ball faster and faster.", "Caption B: The man dribbles the ball slower."],
    ["Sentence A: The car turns left.", "Sentence B: The car turns right."],
    ["Option 1: A bird flies up.", "Option 2: A bird lands."],
)
TC_PREDICTIONS = [
    "A",
    "B",
    "C",
    "b",
    "A.",
    "B.",
    "B. from right to left",
    "B) right",
    "(B)",
    " B",
    "B.\n",
    "Answer: B",
    "E",
    "B from right to left",
    "from right to left",
    "A. from left to right",
    "C)",
    "D.",
    "Caption A",
    "Caption A.",
    "(A) The man dribbles the ball faster and faster.",
    "The man dribbles the ball faster and faster.",
    "Caption A: The man dribbles the ball faster and faster.",
    "Caption B",
    "caption a",
    "Sentence A",
    "Sentence B.",
    "The car turns right.",
    "(B) The car turns right.",
    "1",
    "2",
    "Option 1",
    "Option 2.",
    "A bird lands.",
    "(1) A bird flies up.",
    "Option 1: A bird flies up.",
    "The man dribbles faster",
]
"""Answers on TempCompass's rules' edge cases: the letter forms each accepts, labels, sentences, case, spaces (no
"None" or "NA": VLMEvalKit's .xlsx reads those as NaN, on which its rules stop)."""


def _tempcompass_items() -> tuple[list[ScoredItem], list[dict]]:
    """Returns one multi-choice row (gold B) and three caption rows (Caption/Sentence/Option labels; golds A, B,
    A), each with every prediction; options as the project's reader gives them (multi-choice letters dropped)."""
    questions = [("multi-choice", MULTI_CHOICE, "B")]
    questions += [
        ("caption_matching", dict(zip("AB", cands, strict=True)), g) for cands, g in zip(CAPTIONS, "ABA", strict=True)
    ]
    items, rows = [], []
    for task_type, options, gold in questions:
        written = [f"{k}. {v}" if task_type == "multi-choice" else v for k, v in options.items()]
        for prediction in TC_PREDICTIONS:
            i = len(items)
            items.append(
                ScoredItem(id=str(i), prediction=prediction, reference=gold, options=options, subset=task_type)
            )
            rows.append(
                {
                    "index": i,
                    "task_type": task_type,
                    "question": "Which one?",
                    "dim": ("speed", "direction")[i % 2],
                    "answer": written["ABC".index(gold)],
                    "candidates": str(written),
                    "prediction": prediction,
                }
            )
    return items, rows


@pytest.mark.slow
def test_tempcompass_agrees_with_vlmeval_row_by_row(tmp_path: Path) -> None:
    env = require_vlmeval_env()
    items, rows = _tempcompass_items()
    theirs = _evaluate(env, tmp_path, "vlmeval.dataset.tempcompass.TempCompass_MCQ", rows, nproc=1)
    mine = [is_correct("tempcompass_mcq", item) for item in items]
    assert [bool(s) for s in theirs["scores"]] == mine
    assert 0 < sum(mine) < len(mine)
    assert _disagrees_with_generic("tempcompass_mcq", items)
    hits, total = (sum(v[k] for v in theirs["rating"].values()) for k in (0, 1))  # [hits, rows] per dim. task
    assert total == len(items)
    assert score_items("tempcompass_mcq", items).metrics["score"] == pytest.approx(100.0 * hits / total)


def test_rules_on_hand_checked_answers() -> None:
    """The rules as read from VLMEvalKit's source, without its environment."""
    opts = {"A": "cat", "B": "dog", "C": "bird"}
    mv = [
        is_correct("mvbench", ScoredItem(id="0", prediction=p, reference="B", options=opts))
        for p in ("b)", "(", "A", "Answer: A", "dog")
    ]
    assert mv == [True, True, False, False, True]
    ml = [
        is_correct("mlvu", ScoredItem(id="0", prediction=p, reference="B", options=opts))
        for p in ("(B) cat", "b", "(A) dog", "dog", ")")
    ]
    assert ml == [True, False, False, True, False]
    vm = [
        is_correct("videomme", ScoredItem(id="0", prediction=p, reference="B", options=opts))
        for p in ("Based on it, A", "Answer: B", "b", "dog")
    ]
    assert vm == [True, True, False, False]
    caption = {"A": "Caption A: fast.", "B": "Caption B: slow."}
    tc = [
        is_correct("tempcompass_mcq", ScoredItem(id="0", prediction=p, reference="B", options=caption, subset=t))
        for p, t in (("B", "caption_matching"), ("slow.", "caption_matching"), ("(B) slow.", "caption_matching"))
    ]
    assert tc == [True, True, True]
    with pytest.raises(ValueError, match="task_type"):
        is_correct("tempcompass_mcq", ScoredItem(id="0", prediction="B", reference="B", options=caption))
    missed = score_items("mlvu", [ScoredItem(id="0", prediction=None, reference="A", options=opts)]).metrics
    assert (missed["score"], missed["missing"]) == (0.0, 1.0)
