"""The synthetic benchmarks are asked in the format the tiny model was trained on: their configs' prompt parts
(``conf/bench_prompt/project.yaml``) render exactly ``format_question``, training's question text."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparsectx.data import format_question, read_tsv
from sparsectx.data.layout import render_question
from sparsectx.eval.config import compose_bench

from .conftest import BENCHES

MCQ_HINT = "Answer with the option's letter."


@pytest.mark.parametrize("bench", BENCHES)
def test_synthetic_prompt_parts_render_trainings_question_text(bench: str, small_suite) -> None:
    cfg, _ = small_suite
    items, skips = read_tsv(Path(cfg.out_dir) / f"{bench}.tsv")
    parts = compose_bench(bench).layout.prompt
    assert skips == [] and items
    for item in items:
        assert render_question(item, parts, MCQ_HINT) == format_question(item.question, item.options, MCQ_HINT)
    assert any(item.options for item in items) == (bench == "syn_mcq")
