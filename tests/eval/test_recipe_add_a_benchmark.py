"""The recipe of docs/extending.md, "Add a benchmark", followed with a toy multiple-choice benchmark.

The toy is exactly what the recipe says to write: one ``bench/<name>.yaml`` (here in a user's ``--config-dir``)
that states, as data, how VLMEvalKit's file for the benchmark is read and asked (its file name, the rows
VLMEvalKit drops, where the options are, what the gold cell holds, the shared prompt parts of its dataset class)
and names a shipped scorer; the file itself is a VLMEvalKit TSV in ``ImageMCQDataset``'s layout, found in
``$LMUData`` as VLMEvalKit keeps it. No other file is written or edited: the entry's command-line checks, the
reader (options, gold letters, the dropped row), the prompt and an evaluation run on the tiny model then accept
the toy as they accept a shipped benchmark.
"""

from __future__ import annotations

import base64
import csv
import io
import json
from pathlib import Path

import pytest
from hydra import compose
from tiny_models import noise_image

from sparsectx.cli import check_command_line, config_search
from sparsectx.data.layout import render_question
from sparsectx.eval.config import load_eval_config
from sparsectx.eval.protocol import is_correct, load_bench_items, sample_id
from sparsectx.eval.runner import run
from sparsectx.eval.scorers import ScoredItem
from sparsectx.io import read_jsonl

from .test_runner_support import CONF, SIDE, build_model_dir

BENCH_YAML = """\
# @package bench.toy_mcq
# Toy multiple-choice benchmark in VLMEvalKit's ImageMCQDataset layout (tests/eval/test_recipe_add_a_benchmark.py).
# Needs ToyMCQ.tsv in $LMUData or data/, or set bench.toy_mcq.path=<file>.
defaults:
  - /bench_prompt@layout.prompt: vlmeval_mcq   # ImageMCQDataset.build_prompt's parts
  - _self_
name: toy_mcq
dataset_name: ToyMCQ        # VLMEvalKit's spelling of the dataset
path: null                  # null: $LMUData (else ~/LMUData), then data/
scorer: mcq_vlmeval         # a shipped scorer: VLMEvalKit's multiple-choice matching
max_new_tokens: 8
group_by: none
subset_field: none
layout:
  files: [ToyMCQ.tsv]
  drop_rows: [no_image]     # rows VLMEvalKit drops (ImageBaseDataset skip_noimg), counted
  options: columns          # the A-Z cells
  options_column: ""
  answer: letter            # the gold cell holds a letter, "C. text" or an option's text: mapped to its letter
  gold_column: answer
  source: "vlmeval/dataset/image_mcq.py ImageMCQDataset"
"""

ROWS = [  # index, hint, question, A-D, answer cell, the gold letter the layout must map it to
    ("0", "Look at the top.", "What colour is the square?", ("red", "blue", "green", ""), "B", "B"),
    ("1", "", "How many dots are there?", ("1", "2", "3", "4"), "C. 3", "C"),
    ("2", "N/A", "Which shape is it?", ("circle", "square", "", ""), "square", "B"),
    ("3", "", "A row without its image", ("yes", "no", "", ""), "A", None),
    ("4", "", "Is it daytime?", ("yes", "no", "", ""), "A", "A"),
]
"""Row 3 has no image (VLMEvalKit drops it); the hint ``N/A`` is a cell pandas reads as missing."""


def png_b64(seed: int) -> str:
    """Returns a base64 PNG of SIDE x SIDE noise, as a VLMEvalKit TSV's ``image`` cell holds it."""
    buffer = io.BytesIO()
    noise_image(SIDE, SIDE, seed).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def vlmeval_text(hint: str, question: str, options: tuple[str, ...]) -> str:
    """Returns the text VLMEvalKit builds for a row: ``vlmeval/dataset/image_mcq.py``, ``ImageMCQDataset.build_prompt``
    (``Hint:`` unless the cell is missing, ``Question:``, ``Options:`` with one line per non-missing A-Z cell, the
    closing line); a missing cell is one ``pd.read_csv`` reads as NaN (``vlmeval.smp.load``)."""
    text = f"Hint: {hint}\n" if hint not in ("", "N/A") else ""
    text += f"Question: {question}\nOptions:\n"
    text += "".join(f"{letter}. {option}\n" for letter, option in zip("ABCD", options, strict=True) if option)
    return text + "Please select the correct answer from the options above. \n"


@pytest.fixture
def lmu_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Returns VLMEvalKit's data folder (``$LMUData``) holding ToyMCQ.tsv, written as pandas' ``to_csv(sep='\\t')``
    writes VLMEvalKit's files."""
    folder = tmp_path / "LMUData"
    folder.mkdir()
    with open(folder / "ToyMCQ.tsv", "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(["index", "question", "hint", "A", "B", "C", "D", "answer", "category", "image"])
        for index, hint, question, options, answer, gold in ROWS:
            image = png_b64(int(index)) if gold is not None else ""
            writer.writerow([index, question, hint, *options, answer, "toy", image])
    monkeypatch.setenv("LMUData", str(folder))
    return folder


@pytest.fixture
def toy_bench(tmp_path: Path) -> Path:
    """Follows the recipe (the bench YAML) and returns the user's config folder holding it."""
    conf = tmp_path / "my_conf"
    (conf / "bench").mkdir(parents=True)
    (conf / "bench" / "toy_mcq.yaml").write_text(BENCH_YAML)
    return conf


def compose_with(conf: Path, overrides: list[str]):  # noqa: ANN201
    """Returns ``evaluate`` composed as ``src/evaluate.py --config-dir <conf> <overrides>`` composes it."""
    with config_search(CONF, conf, None):
        return compose("evaluate", overrides=overrides)


def test_the_config_checks_accept_the_toy(toy_bench: Path) -> None:
    argv = ["--config-dir", str(toy_bench), "bench=toy_mcq", "budget=0.5"]
    check_command_line(CONF, "evaluate", argv, False, None)  # the entry script's checks before Hydra runs
    (spec,) = load_eval_config(compose_with(toy_bench, argv[2:])).bench.values()
    assert (spec.name, spec.dataset_name, spec.scorer, spec.layout.files) == (
        "toy_mcq",
        "ToyMCQ",
        "mcq_vlmeval",
        ["ToyMCQ.tsv"],
    )
    assert spec.layout.prompt.source == "vlmeval/dataset/image_mcq.py ImageMCQDataset.build_prompt"


def test_the_file_is_read_and_asked_as_vlmeval_reads_and_asks_it(toy_bench: Path, lmu_data: Path) -> None:
    (spec,) = load_eval_config(compose_with(toy_bench, ["bench=toy_mcq"])).bench.values()
    items, skips, dropped = load_bench_items(spec, 0.0)
    assert skips == [] and len(dropped) == 1  # row 3: no image, dropped as VLMEvalKit drops it
    kept = [row for row in ROWS if row[-1] is not None]
    assert [sample_id(item) for item in items] == [row[0] for row in kept]
    for item, (_, hint, question, options, _, gold) in zip(items, kept, strict=True):
        assert item.answer == gold
        assert item.options == {letter: text for letter, text in zip("ABCD", options, strict=True) if text}
        assert render_question(item, spec.layout.prompt, "unused") == vlmeval_text(hint, question, options)


@pytest.mark.slow
def test_an_evaluation_runs_on_the_toy(toy_bench: Path, lmu_data: Path, tmp_path: Path) -> None:
    model = build_model_dir(tmp_path / "model", "qwen2_5_vl", weights=True)
    overrides = ["bench=toy_mcq", f"model.path={model}", "logger=none", f"results_root={tmp_path / 'results'}"]
    (out,) = run(compose_with(toy_bench, [*overrides, "max_failure_rate=1.0", "budget=0.5"]))
    assert out == tmp_path / "results" / "dev" / "tiny" / "base" / "visionzip" / "0.5" / "toy_mcq.json"
    result = json.loads(out.read_text())
    assert (result["benchmark"], result["dataset_name"], result["scorer"]) == ("toy_mcq", "ToyMCQ", "mcq_vlmeval")
    assert (result["n_rows"], result["n_scored"], result["n_dropped"], result["n_skipped"]) == (5, 4, 1, 0)

    rows = read_jsonl(out.parent / "toy_mcq.predictions.jsonl")
    kept = {row[0]: row for row in ROWS if row[-1] is not None}
    assert [row["id"] for row in rows] == list(kept)
    for row in rows:
        _, hint, question, options, _, gold = kept[row["id"]]
        assert vlmeval_text(hint, question, options) in row["prompt"]
        lettered = {letter: text for letter, text in zip("ABCD", options, strict=True) if text}
        item = ScoredItem(id=row["id"], prediction=row["answer"], reference=gold, options=lettered)
        assert row["correct"] == (row["answer"] is not None and is_correct("mcq_vlmeval", item))
