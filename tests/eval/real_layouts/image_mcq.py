"""Image multiple-choice benchmarks in their real layouts: the VLMEvalKit ``ImageMCQDataset`` family and its
subclasses."""

from __future__ import annotations

from ..vlmeval_cases import png_b64
from . import RealFile


def _letter_answers() -> tuple:
    """Returns (right, wrong) answer makers for letter-graded rows: the gold letter, and another letter."""
    return (lambda _id, gold: gold), (lambda _id, gold: "B" if gold != "B" else "A")


def mmbench_dev_en() -> RealFile:
    """MMBench_DEV_EN.tsv: ``index, question, hint, A, B, C, D, answer, category, image, source, l2-category,
    comment, split`` (open-compass/MMBench's released TSV, as VLMEvalKit's ``ImageMCQDataset`` reads it). Quirks
    kept: ``hint`` empty on most rows (pandas reads it as NaN, and ``build_prompt`` leaves out ``Hint:``); a
    three-option question leaves ``D`` empty; the circular copies (``index`` + k x 1,000,000, the options
    rotated) store the original row's ``index`` in their ``image`` cell (VLMEvalKit's shared-image reference)."""
    base = [
        ("What is the colour of the ball?", "The ball is on a table.", ["red", "blue", "green", "yellow"], "A"),
        ("How many people are there?", "", ["one", "two", "three"], "C"),
    ]
    rows = []
    for q, (question, hint, options, gold) in enumerate(base):
        gold_text = options["ABCD".index(gold)]
        for k in range(len(options)):
            rotated = options[k:] + options[:k]
            cells = dict(zip("ABCD", rotated + [""] * (4 - len(rotated)), strict=True))
            rows.append(
                {
                    "index": str(q + k * 1_000_000), "question": question, "hint": hint, **cells,
                    "answer": "ABCD"[rotated.index(gold_text)], "category": "attribute_recognition",
                    "image": png_b64(q + 1) if k == 0 else str(q), "source": "MMBench", "l2-category":
                    "finegrained_perception (instance-level)", "comment": "", "split": "dev",
                }
            )  # fmt: skip
    return RealFile(rows, *_letter_answers())


FILES = {"mmbench_en": mmbench_dev_en}
"""Benchmark name -> builder of its miniature file."""
