"""VLMEvalKit's multi-image rows (MuirBench: an image cell holding a list) and video rows' ``candidates``.

A multi-image row keeps every image in order (``Item.images``) and round-trips through ``write_tsv``; a bad
image inside the list is a counted skip naming its position. A video row without option columns takes its
options from ``candidates`` under a ``list`` layout, and an answer given as option text becomes its letter.
"""

from __future__ import annotations

import base64
import csv
import io
import json
from pathlib import Path

import numpy as np
from PIL import Image

from sparsectx.data import read_tsv, write_tsv
from sparsectx.data.layout import BenchLayout, PromptParts, apply_layout

PARTS = PromptParts(["{question}"], "{letter}. {text}", "\n", "", "", "test")


def _b64(value: int, size: tuple[int, int]) -> str:
    buffer = io.BytesIO()
    Image.fromarray(np.full((size[1], size[0], 3), value, dtype=np.uint8)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _write(path: Path, header: list[str], rows: list[list[str]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


def test_multi_image_rows_keep_every_image_in_order_and_round_trip(tmp_path: Path) -> None:
    images = [_b64(10, (16, 8)), _b64(20, (8, 16)), _b64(30, (12, 12))]
    header = ["index", "image", "question", "A", "B", "answer", "category"]
    rows = [
        [
            "0",
            str(images),
            "Which image is brighter?",
            "first",
            "second",
            "B",
            "x",
        ],  # Python list, as VLMEvalKit
        ["1", json.dumps(images[:2]), "Same scene?", "yes", "no", "A", "x"],
        ["2", json.dumps([images[0], "bm90IGFuIGltYWdl"]), "Broken?", "yes", "no", "A", "x"],
        ["3", images[2], "One image?", "yes", "no", "A", "x"],
    ]
    _write(tmp_path / "muir.tsv", header, rows)
    items, skips = read_tsv(tmp_path / "muir.tsv")
    assert [item.index for item in items] == [0, 1, 3]
    assert [[im.size for im in item.images()] for item in items] == [
        [(16, 8), (8, 16), (12, 12)],
        [(16, 8), (8, 16)],
        [(12, 12)],
    ]
    assert [im.getpixel((0, 0))[0] for im in items[0].images()] == [10, 20, 30]
    assert len(skips) == 1 and skips[0].index == "2" and "image 1: image does not decode" in skips[0].reason
    write_tsv(tmp_path / "again.tsv", items)
    again, none = read_tsv(tmp_path / "again.tsv")
    assert none == [] and again == items


def test_video_rows_take_options_from_candidates_under_a_list_layout(tmp_path: Path) -> None:
    header = ["index", "video", "question", "candidates", "answer"]
    rows = [
        ["0", "clip_a", "What happens?", str(["A. a cat runs", "B. a dog sits"]), "B"],  # Video-MME style
        ["1", "clip_b", "What moves?", str(["the ball", "the box", "nothing"]), "the box"],  # MVBench style
    ]
    _write(tmp_path / "v.tsv", header, rows)
    read, skips = read_tsv(tmp_path / "v.tsv")
    assert skips == [] and [item.video for item in read] == ["clip_a", "clip_b"]
    assert all(item.options == {} for item in read)  # the reader keeps the cell; the layout reads it
    layout = BenchLayout(["v.tsv"], [], "list", "candidates", "letter", "answer", PARTS, "test")
    items, unmapped = apply_layout(read, layout)
    assert unmapped == []
    assert items[0].options == {"A": "a cat runs", "B": "a dog sits"} and items[0].answer == "B"
    assert items[1].options == {"A": "the ball", "B": "the box", "C": "nothing"} and items[1].answer == "B"
