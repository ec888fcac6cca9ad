"""The preflight (``src/preflight.py``, ``sparsectx.preflight``): a clean tiny input passes, and each
class of broken checkpoint folder or benchmark file is caught, one at a time, by a line naming the file, the
row (index), the column and the fix. The checkpoint folders here hold no weights: the preflight loads none."""

from __future__ import annotations

import base64
import csv
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from family_models import published_checkpoint
from hydra import compose, initialize_config_dir
from PIL import Image

from sparsectx import workflow as wf
from sparsectx.data.build import load_build_config
from sparsectx.data.synthetic import build_suite
from sparsectx.eval.config import compose_bench
from sparsectx.preflight import (
    Checked,
    Problem,
    check_benchmark,
    check_checkpoint,
    load_preflight_config,
    report_lines,
)
from sparsectx.preflight.run import targets

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
TINY = ROOT / "src" / "sparsectx" / "assets" / "tiny-vlm"
BENCHES = ("syn_detail", "syn_count", "syn_spatial", "syn_ocr", "syn_pope", "syn_mcq")


def compose_preflight(*overrides: str):
    """Returns ``conf/preflight.yaml`` composed with ``overrides``."""
    with initialize_config_dir(version_base=None, config_dir=str(CONF)):
        return compose("preflight", overrides=list(overrides))


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Returns a launch folder holding ``data/tiny/`` with the synthetic suite, 12 items per benchmark."""
    root = tmp_path_factory.mktemp("launch")
    sizes = [f"data.benches.{bench}.size=12" for bench in BENCHES]
    with initialize_config_dir(version_base=None, config_dir=str(CONF)):
        cfg = compose(
            "build_data",
            overrides=[f"data.out_dir={root}/data/tiny", "data.train.size=12", "processor.write=false", *sizes],
        )
    build_suite(load_build_config(cfg).data)
    return root


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    """Returns a copy of the shipped tiny checkpoint without its weights."""
    folder = tmp_path / "tiny-vlm"
    shutil.copytree(TINY, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    return folder


def checked_model(folder: Path) -> Checked:
    """Returns the preflight's checkpoint check of ``folder`` as ``model=tiny``."""
    model = load_preflight_config(compose_preflight(f"model.path={folder}")).model
    return check_checkpoint("tiny", model)


def only(checked: Checked) -> Problem:
    """Returns the one problem of ``checked`` (fails when there are none or several)."""
    assert len(checked.problems) == 1, [p.line() for p in checked.problems]
    return checked.problems[0]


# ---- clean ----------------------------------------------------------------------------------------------
def test_clean_tiny_input_passes_on_the_command_line(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, str(ROOT / "src" / "preflight.py"), "bench=synthetic", f"out={out}"]
    done = subprocess.run(cmd, cwd=suite, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[-1].startswith("preflight passed: 1 checkpoint, 6 benchmarks checked, no problem")
    assert "PROBLEM" not in done.stdout
    assert "family qwen2_5_vl" in lines[0] and "one <|image_pad|> per image" in lines[0]
    assert "eos ids [2]" in lines[0] and "640x480 image -> 234 visual tokens" in lines[0]
    report = json.loads(out.read_text())
    assert report["passed"] and len(report["inputs"]) == 7
    assert sorted(p.name for p in suite.iterdir()) == ["data"]  # nothing generated in the launch folder


def test_a_broken_input_exits_1_and_writes_no_report(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    cmd = [
        sys.executable,
        str(ROOT / "src" / "preflight.py"),
        "bench=syn_mcq",
        f"out={out}",
        f"bench.syn_mcq.path={tmp_path / 'absent.tsv'}",
    ]
    done = subprocess.run(cmd, cwd=suite, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    problem, summary = done.stdout.strip().splitlines()[-2:]
    assert problem.startswith(f"PROBLEM {tmp_path / 'absent.tsv'}: benchmark 'syn_mcq'") and "-> fix:" in problem
    assert summary.startswith("preflight FAILED: 1 problem(s) in 1 of 2 inputs (benchmark syn_mcq)")
    assert not out.exists()


def test_list_names_every_file_with_where_and_how(suite: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, str(ROOT / "src" / "preflight.py"), "experiment=scopd_qwen2_5_vl_7b", "--list"]
    done = subprocess.run(cmd, cwd=suite, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "[MISSING] checkpoint qwen2_5_vl_7b" in out and "hf download Qwen/Qwen2.5-VL-7B-Instruct --revision " in out
    assert "[MISSING] benchmark mme (MME): MME.tsv" in out and "build_dataset('MME')" in out
    assert "[MISSING] video folder mvbench" in out and "bench.mvbench.video.root" in out
    assert "[MISSING] training file data/llava_cot_10k.tsv" in out
    assert "python src/build_data.py data/sources=llava_cot" in out
    assert "data/raw/LLaVA-CoT-100k/train.jsonl" in out
    assert out.strip().splitlines()[-1].startswith("preflight --list: ")


# ---- checkpoint folder, one problem at a time -----------------------------------------------------------
def test_clean_checkpoint_without_weights(checkpoint: Path) -> None:
    checked = checked_model(checkpoint)
    assert checked.problems == []
    assert "thinking prefix ''" in "; ".join(checked.facts)


def test_the_answer_prefix_is_reported(checkpoint: Path) -> None:
    model = load_preflight_config(compose_preflight(f"model.path={checkpoint}", "model.answer_prefix='<answer>'"))
    checked = check_checkpoint("tiny", model.model)
    assert checked.problems == []
    assert "thinking prefix '', answer prefix '<answer>'" in "; ".join(checked.facts)


def test_an_answer_prefix_inside_an_open_thinking_block(tmp_path: Path) -> None:
    folder = published_checkpoint("Qwen3.5-4B", tmp_path / "qwen35")
    overrides = ["model=qwen3_5_4b", f"model.path={folder}", "model.answer_prefix='<answer>'"]
    problem = only(check_checkpoint("qwen3_5_4b", load_preflight_config(compose_preflight(*overrides)).model))
    assert problem.file == str(folder / "tokenizer_config.json") and problem.column == "chat_template"
    assert "model.answer_prefix='<answer>' would be pre-filled inside the thinking block" in problem.what
    assert "'<think>\\n'" in problem.what and "set model.thinking=false" in problem.fix
    thinking_off = [*overrides, "model.thinking=false"]
    assert check_checkpoint("qwen3_5_4b", load_preflight_config(compose_preflight(*thinking_off)).model).problems == []


def test_no_config_json(checkpoint: Path) -> None:
    (checkpoint / "config.json").unlink()
    problem = only(checked_model(checkpoint))
    assert problem.file == str(checkpoint / "config.json") and "no config.json" in problem.what
    assert "set model.path to the folder that holds the checkpoint's config.json" in problem.fix


def test_unknown_model_type(checkpoint: Path) -> None:
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    problem = only(checked_model(checkpoint))
    assert problem.file == str(checkpoint / "config.json") and problem.column == "model_type"
    assert "'llama' has no adapter" in problem.what
    assert "model_type is one of" in problem.fix and "qwen2_5_vl" in problem.fix and "glm4v" in problem.fix
    assert problem.line().startswith(f"PROBLEM {checkpoint / 'config.json'}, column 'model_type': ")


def test_no_chat_template(checkpoint: Path) -> None:
    (checkpoint / "chat_template.jinja").unlink()
    problem = only(checked_model(checkpoint))
    assert problem.file == str(checkpoint) and "no chat template" in problem.what
    assert "copy the checkpoint's chat_template.jinja" in problem.fix


def test_template_without_image_marker(checkpoint: Path) -> None:
    template = checkpoint / "chat_template.jinja"
    template.write_text(template.read_text().replace("<|image_pad|>", ""))
    problem = only(checked_model(checkpoint))
    assert problem.file == str(template)
    assert "does not render one '<|image_pad|>' per image part (0 for one image)" in problem.what
    assert "use the checkpoint's own template" in problem.fix


# ---- benchmark files, one problem at a time -------------------------------------------------------------
def rewrite(source: Path, target: Path, edit: Callable[[list[str], list[list[str]]], None]) -> Path:
    """Returns ``target`` after writing ``source``'s TSV with ``edit(header, rows)`` applied in place."""
    csv.field_size_limit(2**31 - 1)
    with open(source, encoding="utf-8", newline="") as handle:
        header, *rows = list(csv.reader(handle, delimiter="\t"))
    edit(header, rows)
    with open(target, "w", encoding="utf-8", newline="") as handle:
        csv.writer(handle, delimiter="\t", lineterminator="\n").writerows([header, *rows])
    return target


def checked_mcq(suite: Path, tmp_path: Path, edit: Callable[[list[str], list[list[str]]], None]) -> Checked:
    """Returns the preflight's check of syn_mcq after ``edit``."""
    path = rewrite(suite / "data" / "tiny" / "syn_mcq.tsv", tmp_path / "syn_mcq.tsv", edit)
    return check_benchmark(compose_bench("syn_mcq", [f"bench.syn_mcq.path={path}"]))


def set_cell(row: int, column: str, value: str) -> Callable[[list[str], list[list[str]]], None]:
    """Returns an edit setting ``column`` of the ``row``-th data row to ``value``."""

    def edit(header: list[str], rows: list[list[str]]) -> None:
        rows[row][header.index(column)] = value

    return edit


def test_clean_benchmark(suite: Path, tmp_path: Path) -> None:
    checked = checked_mcq(suite, tmp_path, lambda header, rows: None)
    assert checked.problems == [] and checked.facts == ["12 usable rows"]


def test_missing_benchmark_file(tmp_path: Path) -> None:
    absent = tmp_path / "nowhere" / "syn_mcq.tsv"
    problem = only(check_benchmark(compose_bench("syn_mcq", [f"bench.syn_mcq.path={absent}"])))
    assert problem.file == str(absent) and "file syn_mcq.tsv not found" in problem.what
    assert "python src/build_data.py" in problem.fix and "bench.syn_mcq.path=<file or folder>" in problem.fix


def test_missing_column(suite: Path, tmp_path: Path) -> None:
    def drop_question(header: list[str], rows: list[list[str]]) -> None:
        at = header.index("question")
        for cells in [header, *rows]:
            del cells[at]

    problem = only(checked_mcq(suite, tmp_path, drop_question))
    assert problem.file == str(tmp_path / "syn_mcq.tsv") and problem.column == "question" and problem.row == ""
    assert "no column 'question'" in problem.what and "VLMEvalKit writes for syn_mcq" in problem.fix


def test_mcq_row_without_options(suite: Path, tmp_path: Path) -> None:
    def blank_options(header: list[str], rows: list[list[str]]) -> None:
        for letter in "ABCD":
            rows[3][header.index(letter)] = ""

    problem = only(checked_mcq(suite, tmp_path, blank_options))
    assert (problem.row, problem.column) == ("3", "A")
    assert "no options, but scorer mcq scores multiple choice" in problem.what
    assert "put the row's options in columns A, B, ..." in problem.fix
    assert problem.line().startswith(f"PROBLEM {tmp_path / 'syn_mcq.tsv'}, row 3, column 'A': ")


def test_undecodable_image(suite: Path, tmp_path: Path) -> None:
    bad = base64.b64encode(b"not an image at all").decode()
    problem = only(checked_mcq(suite, tmp_path, set_cell(5, "image", bad)))
    assert (problem.row, problem.column) == ("5 (line 7)", "image")
    assert "image does not decode" in problem.what and "re-encode the image as base64" in problem.fix


def test_repeated_index(suite: Path, tmp_path: Path) -> None:
    problem = only(checked_mcq(suite, tmp_path, set_cell(4, "index", "0")))
    assert (problem.row, problem.column) == ("0 (line 6)", "index")
    assert "index 0 repeats an earlier row" in problem.what and "unique index" in problem.fix


def test_unmappable_answer(suite: Path, tmp_path: Path) -> None:
    problem = only(checked_mcq(suite, tmp_path, set_cell(2, "answer", "Z")))
    assert (problem.row, problem.column) == ("2", "answer")
    assert "gold 'Z' is neither an option letter (A, B, C, D)" in problem.what
    assert "fix the row's answer cell, or the layout (bench.syn_mcq.layout.answer" in problem.fix


def test_missing_video_clip(tmp_path: Path) -> None:
    clips = tmp_path / "video" / "star"
    (clips / "present").mkdir(parents=True)
    for number in range(4):
        Image.new("RGB", (8, 8), (number * 40, 0, 0)).save(clips / "present" / f"{number:03d}.png")
    columns = [
        "task_type",
        "prefix",
        "data_type",
        "bound",
        "start",
        "end",
        "video",
        "question",
        "answer",
        "candidates",
        "index",
    ]
    rows = [
        columns,
        [
            "Action",
            "video/star/",
            "frame",
            "False",
            "",
            "",
            "present",
            "What moves?",
            "a cat",
            "['a cat', 'a dog']",
            "0",
        ],
        [
            "Action",
            "video/star/",
            "frame",
            "False",
            "",
            "",
            "absent",
            "What moves?",
            "a dog",
            "['a cat', 'a dog']",
            "1",
        ],
    ]
    path = tmp_path / "MVBench.tsv"
    with open(path, "w", encoding="utf-8", newline="") as handle:
        csv.writer(handle, delimiter="\t", lineterminator="\n").writerows(rows)
    overrides = [f"bench.mvbench.path={path}", "bench.mvbench.video.frames=2"]
    problem = only(check_benchmark(compose_bench("mvbench", overrides)))
    assert (problem.file, problem.row, problem.column) == (str(path), "1", "video")
    assert f"{clips / 'absent'}: no video file or frame folder there" in problem.what
    assert "bench.mvbench.video.root" in problem.fix


def test_dropped_rows_are_counted_not_problems(tmp_path: Path) -> None:
    image = base64.b64encode(_png()).decode()
    rows = [
        ["index", "image", "question", "answer", "category", "l2-category"],
        ["a_0", image, "Is it red?", "Yes", "VS", "chart"],
        ["a_1", "", "Is the sky green?", "No", "VD", "text-only"],
    ]
    path = tmp_path / "HallusionBench.tsv"
    with open(path, "w", encoding="utf-8", newline="") as handle:
        csv.writer(handle, delimiter="\t", lineterminator="\n").writerows(rows)
    checked = check_benchmark(compose_bench("hallusionbench", [f"bench.hallusionbench.path={path}"]))
    assert checked.problems == []
    assert checked.facts == ["1 usable rows, 1 dropped as VLMEvalKit drops them (no_image)"]


def _png() -> bytes:
    """Returns a small PNG's bytes."""
    import io

    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 0, 0)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_report_caps_lines_per_input_and_ends_with_the_summary() -> None:
    checked = Checked("benchmark", "x", "x.tsv")
    for row in range(5):
        checked.add("x.tsv", "bad", "fix it", row, "image")
    lines = report_lines([checked], max_lines=2)
    assert len(lines) == 4 and lines[2] == "PROBLEM ... and 3 more in benchmark x (max_lines=2)"
    assert lines[-1].startswith("preflight FAILED: 5 problem(s) in 1 of 1 inputs (benchmark x)")


def test_each_model_is_checked_with_its_own_grid_settings() -> None:
    # the DAG's preflight command for LT-OPD, as Snakemake passes it: Qwen3.5 and GLM-4.6V with thinking off and
    # the open answer tag, Qwen3-VL with the answer tag alone (conf/experiment/ltopd_qwen3_5_4b.yaml)
    grid = wf.load_grid("ltopd_qwen3_5_4b")
    args = [a for a in wf.preflight_args(grid) if a.startswith(("models=", "model_settings="))]
    cfg = compose_preflight(*args)
    models = dict(targets(cfg, lambda extra: compose_preflight(*args, *extra)).models)
    assert set(models) == set(grid.names("model"))
    for name, model in models.items():
        own = dict(o.removeprefix("model.").split("=", 1) for o in grid.model_overrides[name])
        assert model.thinking is (False if own.get("thinking") == "false" else None), name
        assert model.answer_prefix == own["answer_prefix"].strip("'"), name
