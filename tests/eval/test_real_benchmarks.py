"""Every real benchmark config against a miniature file in that benchmark's real layout (``rehearsal.benchmarks``).

For each benchmark the project is held to four things:

1. the file, under VLMEvalKit's file name, loads through ``conf/bench/<name>.yaml`` (layout, drop rules)
   without a refusal, and rows VLMEvalKit drops are counted as dropped, never as skips;
2. each row's question text is the text VLMEvalKit's own ``build_prompt`` builds for it: VLMEvalKit runs once
   for the whole suite in its environment (``real_layouts/vlmeval_prompts.py``; the comparison skips, naming
   ``make vlmeval-env``, where that environment is absent), and keeps the same rows;
3. the right answer to every row scores full marks through the benchmark's scorer, and a wrong one 0;
4. multiple-choice gold answers are in the scorer's form (an option letter).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sparsectx.data.layout import render_question
from sparsectx.eval.config import CONF_DIR, BenchSpec, compose_bench
from sparsectx.eval.protocol import is_correct, load_bench_items, sample_id, scored_item
from sparsectx.eval.scorers import score_items
from sparsectx.rehearsal.benchmarks import RealFile, image_mcq, video, vqa, yes_no

from .vlmeval_cases import require_vlmeval_env, vlmeval_env, write_tsv

REAL_FILES = {**image_mcq.FILES, **yes_no.FILES, **vqa.FILES, **video.FILES}
"""Benchmark name -> builder of its miniature file(s), every group's."""
SCRIPT = Path(__file__).resolve().parent / "real_layouts" / "vlmeval_prompts.py"
MCQ_HINT = "Answer with the option's letter."
"""``conf/evaluate.yaml``'s ``prompt.mcq_hint`` (only the project's own prompt parts read it)."""


def real_benchmarks() -> list[str]:
    """Returns every benchmark config whose file is a real benchmark's (not the project's synthetic ones)."""
    names = []
    for path in sorted((CONF_DIR / "bench").glob("*.yaml")):
        text = path.read_text()
        if "layout:" in text and "the project's own file" not in text:
            names.append(path.stem)
    return names


def _parts(name: str) -> list[RealFile]:
    built = REAL_FILES[name]()
    return built if isinstance(built, list) else [built]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """Returns each benchmark's miniature file(s), written under VLMEvalKit's file names in its own folder."""
    root = tmp_path_factory.mktemp("real")
    out = {}
    for name in sorted(REAL_FILES):
        folder = root / name
        folder.mkdir()
        files = compose_bench(name).layout.files
        parts = _parts(name)
        assert len(files) == len(parts), f"{name}: the config names {len(files)} file(s), the fixture {len(parts)}"
        out[name] = [write_tsv(folder / file, part.rows) for file, part in zip(files, parts, strict=True)]
        for part in parts:
            if part.media is not None:  # a video benchmark's clips, beside its file as VLMEvalKit keeps them
                part.media(folder)
    return out


@pytest.fixture(scope="module")
def vlmeval(written: dict[str, list[Path]], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Returns VLMEvalKit's ``build_prompt`` messages per benchmark (one-file benchmarks), {} without its env."""
    if not (vlmeval_env() / "bin" / "python").is_file():
        return {}
    work = tmp_path_factory.mktemp("vlmeval")
    jobs = [
        {
            "key": name,
            "dataset": _parts(name)[0].vlmeval_dataset or compose_bench(name).dataset_name,
            "data": str(paths[0]),
            "unsplit": _parts(name)[0].unsplit,
        }
        for name, paths in written.items()
        if len(paths) == 1 and name not in video.FILES
    ]
    (work / "jobs.json").write_text(json.dumps(jobs))
    command = [
        str(vlmeval_env() / "bin" / "python"),
        str(SCRIPT),
        "--jobs",
        str(work / "jobs.json"),
        "--work-dir",
        str(work / "lmu"),
        "--out",
        str(work / "out.json"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stderr[-3000:]}"
    return json.loads((work / "out.json").read_text())


def test_every_real_benchmark_config_has_a_real_layout_fixture() -> None:
    assert sorted(REAL_FILES) == real_benchmarks()


def _spec(name: str, paths: list[Path]) -> BenchSpec:
    """Returns ``conf/bench/<name>.yaml`` pointed at the folder holding the fixture's files."""
    return compose_bench(name, [f"bench.{name}.path={paths[0].parent}"])


@pytest.mark.parametrize("name", sorted(REAL_FILES))
def test_the_file_loads_and_scores_through_its_config(name: str, written: dict[str, list[Path]]) -> None:
    parts = _parts(name)
    spec = _spec(name, written[name])
    items, skips, dropped = load_bench_items(spec, 0.0)
    assert skips == [], f"{name}: rows refused: {skips}"
    assert len(dropped) == sum(part.dropped for part in parts), f"{name}: dropped {dropped}"
    assert len(items) + len(dropped) == sum(len(part.rows) for part in parts)
    for item in items:
        if item.options:
            assert item.answer in item.options, f"{name} row {item.index}: gold {item.answer!r} is not a letter"
    for pick, want in ((parts[0].right, parts[0].full_score), (parts[0].wrong, 0.0)):
        scored = [scored_item(item, spec, pick(sample_id(item), item.answer)) for item in items]
        assert score_items(spec.scorer, scored, spec.headline).metrics["score"] == want, (name, want)
        assert all(is_correct(spec.scorer, one) == (want > 0) for one in scored), (name, want)


@pytest.mark.parametrize("name", sorted(REAL_FILES))
def test_the_prompt_is_the_one_vlmeval_builds(name: str, written: dict[str, list[Path]], vlmeval: dict) -> None:
    if not vlmeval:
        require_vlmeval_env()  # skips, naming the command that builds the environment
    if name in video.FILES:
        pytest.skip("a video benchmark's prompt is compared with VLMEvalKit's in test_real_video_prompts.py")
    if name not in vlmeval:
        pytest.skip(
            f"{name} spans several files and the pinned VLMEvalKit has no class reading them as one: its prompt "
            "parts restate upstream VLMEvalKit's code (the config cites it), unchecked by VLMEvalKit here"
        )
    reference = vlmeval[name]
    assert "error" not in reference, f"VLMEvalKit could not read {name}'s fixture: {reference.get('error')}"
    spec = _spec(name, written[name])
    items = load_bench_items(spec, 0.0).items
    rows = {row["index"]: row for row in reference["rows"]}
    assert sorted(rows) == sorted(sample_id(item) for item in items), "VLMEvalKit keeps other rows"
    for item in items:
        theirs = rows[sample_id(item)]
        part = _parts(name)[0]
        if not (part.unsplit or part.interleaved):  # as the project does, VLMEvalKit puts images first
            assert theirs["kinds"] == ["image"] * (len(theirs["kinds"]) - 1) + ["text"], theirs["kinds"]
        assert theirs["kinds"].count("image") == len(item.images()), f"{item.index}: VLMEvalKit asks other images"
        assert render_question(item, spec.layout.prompt, MCQ_HINT) == "".join(theirs["texts"]), item.index
