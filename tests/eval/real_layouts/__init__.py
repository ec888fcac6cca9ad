"""Miniature benchmark files in each real benchmark's layout, one module per group of benchmarks.

Each module maps benchmark names (``conf/bench/<name>.yaml``) to a builder of a ``RealFile`` (or one per file
of a benchmark VLMEvalKit ships as several): a few rows with the real file's columns in its order, its cell
types and quirks, each builder's docstring citing where the layout comes from. ``tests/eval/
test_real_benchmarks.py`` checks every real benchmark config against them (``check.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RealFile:
    """A miniature benchmark file: its rows in the real layout, and the answers that are right and wrong."""

    rows: list[dict[str, str]]
    """Rows with the real file's columns in its order (``write_tsv`` writes the union of their keys)."""
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
