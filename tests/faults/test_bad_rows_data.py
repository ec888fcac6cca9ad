"""Fault injection on the data readers: a crafted cell or line is a counted, reported row, never an abort.

Issue 39 (item 7, data layer): ``ast.literal_eval`` and ``json.loads`` raise more than ``ValueError`` on crafted
input (``RecursionError`` on a deeply nested expression, ``MemoryError``), and a file may hold bytes that are not
UTF-8. Whatever a cell holds, the benchmark reader (``tsv.read_rows``, ``layout.apply_layout``) gives a ``Skip``
naming the row and the column, and the training-source reader (``sources.records``) a problem row naming the line.
Fixtures are the benchmarks' real VLMEvalKit layouts (``sparsectx.rehearsal.benchmarks``).
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from PIL import Image

from sparsectx.data.layout import PromptParts, apply_layout, render_question
from sparsectx.data.scenes import Scene
from sparsectx.data.sources.records import read_rows as read_source_rows
from sparsectx.data.tsv import Item, read_rows
from sparsectx.eval.config import compose_bench
from sparsectx.rehearsal.benchmarks import image_mcq, png_b64, video, write_rows

pytestmark = pytest.mark.faults

DEEP_EXPRESSION = "[" + "1+" * 100_000 + "1]"
"""A list cell whose one element is an expression nested past the parser's recursion limit (RecursionError)."""
DEEP_JSON = "[" * 100_000 + "]" * 100_000
"""JSON nested past the decoder's recursion limit (RecursionError)."""


def test_a_crafted_multi_image_cell_is_a_skipped_row(tmp_path: Path) -> None:
    rows = image_mcq.muirbench().rows
    rows[1]["image"] = DEEP_EXPRESSION
    result = read_rows(write_rows(tmp_path / "MUIRBench.tsv", rows), drop_no_image=False)
    assert [item.index for item in result.items] == [0]
    (skip,) = result.skips
    assert skip.index == "1" and "images cell" in skip.reason and "RecursionError" in skip.reason, skip


def test_a_crafted_frames_cell_is_a_skipped_row(tmp_path: Path) -> None:
    frame = png_b64(30)
    rows = [
        {"index": "0", "frames": json.dumps([frame, frame]), "fps": "2.0", "question": "q?", "answer": "A"},
        {"index": "1", "frames": DEEP_EXPRESSION, "fps": "2.0", "question": "q?", "answer": "A"},
    ]
    result = read_rows(write_rows(tmp_path / "tiny_video.tsv", rows), drop_no_image=False)
    assert [item.index for item in result.items] == [0]
    (skip,) = result.skips
    assert skip.index == "1" and "frames cell" in skip.reason, skip


@pytest.mark.parametrize("cell", [DEEP_EXPRESSION, "(" * 300 + ")" * 300, "['a', 'b'"])
def test_a_crafted_options_list_cell_is_a_skipped_row(tmp_path: Path, cell: str) -> None:
    real = video.videomme()
    rows = [dict(row) for row in real.rows]
    rows[0]["candidates"] = cell
    folder = tmp_path / "Video-MME"
    folder.mkdir()
    result = read_rows(write_rows(folder / "Video-MME.tsv", rows), drop_no_image=False)
    spec = compose_bench("videomme")
    items, skips = apply_layout(result.items, spec.layout)
    assert [str(item.index) for item in items] == [rows[1]["index"]]
    (skip,) = skips
    assert skip.index == rows[0]["index"] and "'candidates'" in skip.reason, skip


def test_a_crafted_lines_field_leaves_its_part_out_of_the_prompt() -> None:
    item = Item(0, b"", "What moves?", {}, "A", "", "", "", "", "", {"candidates": DEEP_EXPRESSION})
    parts = PromptParts(["Q: {question}", "\n{candidates:lines}"], "", "", "", "", "test")
    assert render_question(item, parts, "") == "Q: What moves?"


def _image_b64(side: int, fmt: str) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (side, side), (7, 7, 7)).save(buffer, format=fmt)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


@pytest.mark.parametrize(
    ("cell", "reason"),
    [
        ("not base64 at all!", "not valid base64"),
        (_image_b64(16, "PNG")[:40], "does not decode"),  # a truncated PNG
        (_image_b64(16, "GIF"), "format GIF"),  # a format outside image_formats
    ],
)
def test_a_bad_image_cell_in_a_real_layout_is_a_skipped_row(tmp_path: Path, cell: str, reason: str) -> None:
    rows = image_mcq.mmstar().rows
    rows[2]["image"] = cell
    result = read_rows(write_rows(tmp_path / "MMStar.tsv", rows), drop_no_image=False)
    assert [item.index for item in result.items] == [0, 1]
    (skip,) = result.skips
    assert skip.index == "2" and reason in skip.reason, skip


def test_crafted_lines_of_a_jsonl_source_are_problem_rows(tmp_path: Path) -> None:
    path = tmp_path / "train.jsonl"
    good = json.dumps({"id": "a", "image": "x.jpg", "question": "q", "answer": "a"})
    path.write_bytes(b"\n".join([good.encode(), DEEP_JSON.encode(), b'{"id": "\xff\xfe"}', good.encode()]) + b"\n")
    rows = list(read_source_rows(path, "jsonl", "image"))
    assert [row.label for row in rows] == ["line 1", "line 2", "line 3", "line 4"]
    assert [row.record is not None for row in rows] == [True, False, False, True]
    assert "nested too deeply" in rows[1].problem and "UTF-8" in rows[2].problem, rows


def test_a_crafted_json_array_source_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "train.json"
    path.write_text(DEEP_JSON)
    with pytest.raises(ValueError, match=r"train\.json: .*nested too deeply"):
        list(read_source_rows(path, "json", "image"))


@pytest.mark.parametrize("text", [DEEP_JSON, '{"image_size": 4}', "[1, 2]", "{"])
def test_a_crafted_scene_cell_is_a_value_error_naming_the_cell(text: str) -> None:
    with pytest.raises(ValueError, match="scene cell"):
        Scene.from_json(text)
