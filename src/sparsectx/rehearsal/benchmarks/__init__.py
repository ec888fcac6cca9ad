"""Miniature benchmark files in each real benchmark's layout, one module per group of benchmarks.

Each module maps benchmark names (``conf/bench/<name>.yaml``) to a builder of a ``RealFile`` (or one per file
of a benchmark VLMEvalKit ships as several): a few rows with the real file's columns in its order, its cell
types and quirks, each builder's docstring citing where the layout comes from. The rehearsal writes them where
a real run reads its benchmarks (``sparsectx.rehearsal.data``); ``tests/eval/test_real_benchmarks.py`` checks
every real benchmark config against them.
"""

from __future__ import annotations

import base64
import csv
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PIL import Image


@dataclass(frozen=True)
class RealFile:
    """A miniature benchmark file: its rows in the real layout, and the answers that are right and wrong."""

    rows: list[dict[str, str]]
    """Rows with the real file's columns in its order (``write_rows`` writes the union of their keys)."""
    right: Callable[[str, str], str]
    """(sample id, gold answer in the scorer's form) -> an answer the scorer must count right."""
    wrong: Callable[[str, str], str]
    """(sample id, gold answer) -> an answer the scorer must count wrong."""
    dropped: int = 0
    """Rows VLMEvalKit drops (e.g. HallusionBench's rows without an image)."""
    full_score: float = 100.0
    """The scorer's ``score`` when every answer is right (MME: 200 per category of the file)."""
    unsplit: bool = False
    """Compare with VLMEvalKit's text before it interleaves images into it (MMMU's ``split_MMMU``): the
    project puts every image before the text."""
    interleaved: bool = False
    """VLMEvalKit places images inside the text at tags it removes (MUIRBench's ``split_MUIR``); the project
    puts every image first and drops the tags (``PromptParts.remove``): compare VLMEvalKit's text values
    joined, whatever the images' positions."""
    vlmeval_dataset: str = ""
    """The dataset name VLMEvalKit's prompt is built under when the pinned VLMEvalKit lacks the benchmark's
    own and an upstream class with the same ``build_prompt`` stands in (V* Bench: ``ImageMCQDataset``);
    "" = the config's ``dataset_name``."""
    media: Callable[[Path], None] | None = None
    """Writes the media the rows name into the folder holding the file (a video benchmark's clips, which
    VLMEvalKit keeps beside its TSV); None = the rows carry their images."""


Builder = Callable[[], "RealFile | list[RealFile]"]


def png_b64(shade: int) -> str:
    """Returns base64 of a 4x4 PNG of one grey shade (distinct images per shade), as a TSV's ``image`` cell
    holds it."""
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), (shade, shade, shade)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def write_rows(path: Path, rows: list[dict[str, str]]) -> Path:
    """Writes ``rows`` as a TSV with the union of their keys as header (a missing cell empty), quoting as
    pandas' ``to_csv(sep='\\t')`` does (minimal), and returns ``path``."""
    header = list(dict.fromkeys(key for row in rows for key in row))
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(header)
        for row in rows:
            writer.writerow([row.get(column, "") for column in header])
    return path
