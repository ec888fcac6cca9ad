"""Each video benchmark's question text against the text VLMEvalKit's own video class builds for the same row.

The fixtures (``sparsectx/rehearsal/benchmarks/video.py``) are written with their clips; VLMEvalKit runs its own
``prepare_dataset`` and ``build_prompt`` on them in its environment (``real_layouts/vlmeval_video_prompts.py``;
skipped, naming ``make vlmeval-env``, where that environment is absent), sampling the frames itself. For every
row the project keeps, the project's question text (``render_question`` with the config's prompt parts) must
equal VLMEvalKit's user text parts joined in order. VLMEvalKit places the clip between text parts (MVBench,
MLVU, TempCompass) or before them (Video-MME); the project puts the clip first, so only the texts are compared.
The parts the project cannot carry (a class's system message, MVBench's assistant prefix ``"Best option:("``)
are checked to be exactly the ones the configs say are not carried, so a new one fails here.

Video-TT is not in the pinned VLMEvalKit (nvidia-vlmeval 26.3): its text is restated from upstream
``VideoTT.build_prompt`` (open-compass/VLMEvalKit@e8e78f05 vlmeval/dataset/videott.py), whose preamble
``FRAMES_EVAL_PROMPT`` is taken here from the pinned ``VideoMME.FRAMES_TMPL_NOSUB`` (the same text).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sparsectx.data.layout import render_question
from sparsectx.eval.config import compose_bench
from sparsectx.eval.protocol import load_bench_items, sample_id
from sparsectx.rehearsal.benchmarks import video

from .vlmeval_cases import require_vlmeval_env, vlmeval_env, write_tsv

SCRIPT = Path(__file__).resolve().parent / "real_layouts" / "vlmeval_video_prompts.py"
MCQ_HINT = "Answer with the option's letter."
CLASSES = {
    "mvbench": ("vlmeval.dataset.mvbench", "MVBench"),
    "mlvu": ("vlmeval.dataset.mlvu", "MLVU_MCQ"),
    "videomme": ("vlmeval.dataset.videomme", "VideoMME"),
    "tempcompass_mcq": ("vlmeval.dataset.tempcompass", "TempCompass_MCQ"),
}
"""Benchmark -> VLMEvalKit (module, class) in nvidia-vlmeval 26.3."""
NOT_CARRIED = {
    "mvbench": [
        (
            "system",
            "Carefully watch the video and pay attention to the cause and sequence of events, the detail and "
            "movement of objects, and the action and pose of persons. Based on your observations, select the best "
            "option that accurately addresses the question.\n",
        ),
        ("assistant", "Best option:("),
    ],
    "mlvu": [
        (
            "system",
            "Carefully watch this video and pay attention to every detail. Based on your observations, select the "
            "best option that accurately addresses the question.",
        )
    ],
    "videomme": [],
    "tempcompass_mcq": [],
}
"""The (role, text) parts VLMEvalKit sends beyond the user's text, which the configs say are not carried."""


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Returns each video benchmark's folder: its miniature file under VLMEvalKit's name and its clips."""
    root = tmp_path_factory.mktemp("video")
    out = {}
    for name, build in video.FILES.items():
        folder = root / name
        folder.mkdir()
        real = build()
        write_tsv(folder / compose_bench(name).layout.files[0], real.rows)
        real.media(folder)
        out[name] = folder
    return out


@pytest.fixture(scope="module")
def vlmeval(folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Returns VLMEvalKit's messages per benchmark, run once in its environment (skips without it)."""
    env = require_vlmeval_env()
    work = tmp_path_factory.mktemp("vlmeval_video")
    jobs = [
        {"key": name, "module": module, "class": cls, "dataset": compose_bench(name).dataset_name, "folder": str(path)}
        for name, path in folders.items()
        if name in CLASSES
        for module, cls in [CLASSES[name]]
    ]
    (work / "jobs.json").write_text(json.dumps(jobs))
    command = [str(vlmeval_env() / "bin" / "python"), str(SCRIPT), "--jobs", str(work / "jobs.json")]
    command += ["--work-dir", str(work / "lmu"), "--out", str(work / "out.json")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False, cwd=env)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stderr[-3000:]}"
    return json.loads((work / "out.json").read_text())


def _items(name: str, folder: Path) -> list:
    spec = compose_bench(name, [f"bench.{name}.path={folder}"])
    rows = load_bench_items(spec, 0.0)
    assert rows.skips == [], f"{name}: rows refused: {rows.skips}"
    return [(item, render_question(item, spec.layout.prompt, MCQ_HINT)) for item in rows.items]


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_the_question_is_the_text_vlmevalkit_builds(name: str, folders: dict[str, Path], vlmeval: dict) -> None:
    reference = vlmeval[name]
    assert "error" not in reference, f"VLMEvalKit could not build {name}'s fixture:\n{reference.get('error')}"
    rows = {row["index"]: row["messages"] for row in reference["rows"]}
    items = _items(name, folders[name])
    assert sorted(rows) == sorted(sample_id(item) for item, _ in items), "VLMEvalKit keeps other rows"
    for item, ours in items:
        messages = rows[sample_id(item)]
        user = [m for m in messages if m["type"] == "text" and m["role"] == "user"]
        other = [(m["role"], m["value"]) for m in messages if m["type"] == "text" and m["role"] != "user"]
        assert other == NOT_CARRIED[name], f"{name} row {item.index}: VLMEvalKit's non-user parts changed"
        assert sum(m["type"] == "image" for m in messages) > 0, f"{name} row {item.index}: VLMEvalKit saw no frames"
        assert ours == "".join(m["value"] for m in user), f"{name} row {item.index}"


def test_video_tt_is_upstream_videotts_text(folders: dict[str, Path], vlmeval: dict) -> None:
    """Upstream ``VideoTT.build_prompt``: ``SYS`` (''), the frames, ``FRAMES_EVAL_PROMPT``, then
    ``'Question: {}\\nAnswer: '.format(question + '\\n' + question_prompt)``."""
    preamble = vlmeval["constants"]["VideoMME.FRAMES_TMPL_NOSUB"]
    rows = {row["index"]: row for row in video.video_tt().rows}
    items = _items("video_tt", folders["video_tt"])
    assert len(items) == len(rows)
    for item, ours in items:
        row = rows[sample_id(item)]
        expected = "" + preamble + f"Question: {row['question']}\n{row['question_prompt']}\nAnswer: "
        assert ours == expected, item.index


def test_a_video_benchmark_without_its_prefix_column_refuses_every_row(folders: dict[str, Path]) -> None:
    """The clip path is the prefix folder joined with the video cell: without it no MVBench clip is found."""
    spec = compose_bench(
        "mvbench", ["bench.mvbench.path=" + str(folders["mvbench"]), "bench.mvbench.video.prefix_column="]
    )
    with pytest.raises(ValueError, match="no video file or frame folder there"):
        load_bench_items(spec, 0.0)
