"""The TSV reader: round trip, VLMEvalKit-style real files, and bad rows skipped with their index."""

from __future__ import annotations

import base64
import io
import os
from pathlib import Path

import pytest
from PIL import Image

from sparsectx.data.tsv import Item, read_tsv, write_tsv
from sparsectx.io import atomic_write_bytes


def _png(color: tuple[int, int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), color).save(buffer, format="PNG")
    return buffer.getvalue()


def _item(index: int, options: dict[str, str]) -> Item:
    return Item(
        index=index,
        image_bytes=_png((index, 0, 0)),
        question=f'Question {index} with\ttab, "quotes" and\nnewline?',
        options=options,
        answer="A" if options else "red",
        category="color",
        family="mcq" if options else "detail",
        subset="",
        trace="<think>x</think><answer>y</answer>",
        scene='{"objects":[]}',
        extra={},
    )


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    items = [_item(0, {}), _item(1, {"A": "red", "B": "blue", "C": "green", "D": "black"})]
    path = tmp_path / "bench.tsv"
    write_tsv(path, items)
    read, skips = read_tsv(path)
    assert skips == []
    assert read == items
    assert read[1].image().size == (8, 8)
    header = path.read_text().splitlines()[0].split("\t")
    assert header == [
        "index",
        "image",
        "question",
        "A",
        "B",
        "C",
        "D",
        "answer",
        "category",
        "family",
        "subset",
        "trace",
        "scene",
    ]


def test_option_columns_only_when_used(tmp_path: Path) -> None:
    write_tsv(tmp_path / "open.tsv", [_item(0, {})])
    assert "A" not in (tmp_path / "open.tsv").read_text().splitlines()[0].split("\t")


def _line(*cells: str) -> str:
    return "\t".join(cells) + "\n"


def test_bad_rows_are_skipped_counted_and_reported_with_their_index(tmp_path: Path) -> None:
    good = base64.b64encode(_png((1, 2, 3))).decode()
    truncated = base64.b64encode(_png((1, 2, 3))[:40]).decode()
    not_image = base64.b64encode(b"hello world").decode()
    header = _line("index", "image", "question", "answer", "category")
    rows = [
        _line("0", good, "q0", "a", "c"),
        _line("1", "!!not base64!!", "q1", "a", "c"),
        _line("2", truncated, "q2", "a", "c"),
        _line("3", not_image, "q3", "a", "c"),
        _line("4", good, "q4"),  # too few fields
        _line(" ", good, "q5", "a", "c"),  # empty index
        _line("0", good, "q6", "a", "c"),  # repeated index
        _line("7", good, "q7", "", "c"),  # empty answer
        _line("8", "0", "q8 shares row 0's image", "a", "c"),  # VLMEvalKit image reference
        _line("9", "3", "q9 refers to a bad image", "a", "c"),
        _line("10", good, "q10", "a", "c"),
    ]
    path = tmp_path / "bad.tsv"
    path.write_text(header + "".join(rows))
    items, skips = read_tsv(path)
    assert [item.index for item in items] == [0, 8, 10]
    assert items[1].image_bytes == items[0].image_bytes
    reasons = dict(skips)
    assert len(skips) == 8 and len(reasons) == 8
    assert "not valid base64" in reasons["1"]
    assert "does not decode" in reasons["2"] and "does not decode" in reasons["3"]
    assert "3 fields, header has 5" in reasons["4"]
    assert "empty index" in reasons["line 7"]
    assert "repeats" in reasons["0"]
    assert "empty answer" in reasons["7"]
    assert "refers to row 3" in reasons["9"]
    assert all(reason.startswith("line ") for _, reason in skips)


def test_string_indexes_and_their_image_references_read_as_vlmevalkit_reads_them(tmp_path: Path) -> None:
    """HallusionBench's ids are strings; a short image cell naming another row's index shares its image
    (vlmeval/dataset/image_base.py ImageBaseDataset.__init__: every cell of at most 64 characters)."""
    good = base64.b64encode(_png((4, 5, 6))).decode()
    rows = [
        _line("VD_chart_0_1_0_0", good, "q0", "Yes", "VD"),
        _line("VD_chart_0_1_1_0", "VD_chart_0_1_0_0", "q1", "No", "VD"),
        _line("12", good, "q2", "Yes", "VS"),
        _line("VS_map_3_0_0_1", "12", "q3", "No", "VS"),
        _line("VS_map_3_0_0_2", "VS_nowhere_0", "q4", "No", "VS"),
    ]
    path = tmp_path / "hb.tsv"
    path.write_text(_line("index", "image", "question", "answer", "category") + "".join(rows))
    items, skips = read_tsv(path)
    assert [item.index for item in items] == ["VD_chart_0_1_0_0", "VD_chart_0_1_1_0", 12, "VS_map_3_0_0_1"]
    assert items[1].image_bytes == items[0].image_bytes == items[3].image_bytes
    assert [s.index for s in skips] == ["VS_map_3_0_0_2"] and "not valid base64" in skips[0].reason


def test_unterminated_quote_is_reported_with_the_lines_it_swallowed(tmp_path: Path) -> None:
    good = base64.b64encode(_png((1, 2, 3))).decode()
    text = _line("index", "image", "question", "answer") + _line("0", good, '"open quote', "a")
    text += _line("1", good, "q1", "a") + _line("2", good, "q2", "a")
    path = tmp_path / "quote.tsv"
    path.write_text(text)
    items, skips = read_tsv(path)
    assert items == []
    assert len(skips) == 1 and skips[0].index == "0" and "lines 2-4" in skips[0].reason


def test_real_vlmevalkit_file_without_our_columns(tmp_path: Path) -> None:
    good = base64.b64encode(_png((9, 9, 9))).decode()
    header = _line("index", "question", "hint", "A", "B", "C", "D", "answer", "category", "l2-category", "image")
    row = _line("42", "Which?", "nan", "cat", "dog", "nan", "", "B", "attr", "fine", good)
    path = tmp_path / "MMBench.tsv"
    path.write_text(header + row)
    (item,), skips = read_tsv(path)
    assert skips == []
    assert item.index == 42 and item.options == {"A": "cat", "B": "dog"} and item.answer == "B"
    assert item.family == item.trace == item.scene == item.subset == ""
    assert item.extra == {"hint": "nan", "l2-category": "fine"}


def test_missing_required_column_fails_the_file(tmp_path: Path) -> None:
    path = tmp_path / "no_answer.tsv"
    path.write_text(_line("index", "image", "question"))
    with pytest.raises(ValueError, match="answer"):
        read_tsv(path)


def test_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "out.tsv"
    atomic_write_bytes(path, b"old")

    def fail(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.tsv"]
