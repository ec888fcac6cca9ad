"""A benchmark's file(s) checked as evaluation reads them: found, the layout's columns present, every row usable,
options on multiple-choice rows, clips there; rows VLMEvalKit drops counted."""

from __future__ import annotations

import csv
import re
import string
from pathlib import Path

from sparsectx.data.layout import apply_layout
from sparsectx.data.tsv import VIDEO_COLUMNS, Item, Skip, missing_columns, read_rows
from sparsectx.data.video import clip_problem
from sparsectx.eval.config import BenchSpec
from sparsectx.eval.protocol import BUILD_COMMAND, bench_files, video_source
from sparsectx.eval.scorers import SCORERS
from sparsectx.preflight.report import Checked

_LINE = re.compile(r"^lines? [\d-]+: ")
_COLUMN = re.compile(r"column '([^']+)'")
ROW_FIXES = (
    (
        "fields, header has",
        "",
        "the row has a tab too many or too few (an unescaped tab or quote in a cell); "
        "rewrite it, or re-download the file",
    ),
    ("unparseable TSV", "", "re-download the file (VLMEvalKit's TSV) or rewrite the row"),
    ("empty index", "index", "give the row its index (a unique integer or id)"),
    ("repeats an earlier row", "index", "give every row a unique index: predictions and scores are keyed by it"),
    ("empty question", "question", "fill the row's question, or delete the row"),
    ("empty answer", "answer", "fill the row's gold answer, or delete the row"),
    ("frame", "frames", "re-encode every frame as base64 of a PNG/JPEG, or re-download the file"),
    ("image refers to row", "image", "the row it names has no usable image: fix that row (or the reference)"),
    (
        "image",
        "image",
        "re-encode the image as base64 of a PNG/JPEG (VLMEvalKit's encode_image_to_base64), or re-download the file",
    ),
)
"""(reason text, column, fix) of the reader's skips (``tsv.read_rows``), first match wins."""


def row_problem(checked: Checked, file: Path, skip: Skip, spec: BenchSpec) -> None:
    """Records one unusable row (a reader or layout ``Skip``) as a problem naming its column and the fix."""
    match = _LINE.match(skip.reason)
    reason = skip.reason[match.end() :] if match else skip.reason
    row = skip.index if not match or skip.index.startswith("line") else f"{skip.index} ({match.group(0)[:-2]})"
    named = _COLUMN.search(reason)
    if named:
        column = named.group(1)
        fix = (
            f"fix the row's {column} cell, or the layout (bench.{spec.name}.layout.answer / gold_column / "
            "options) if the whole file reads this way"
        )
        checked.add(file, _COLUMN.sub("", reason, count=1).lstrip(": "), fix, row, column)
        return
    for text, column, fix in ROW_FIXES:
        if text in reason:
            checked.add(file, reason, fix, row, column)
            return
    checked.add(file, reason, "fix or delete the row", row)


def header(path: Path) -> list[str]:
    """Returns the first line of a TSV as its column names ([] for an empty file)."""
    csv.field_size_limit(2**31 - 1)
    with open(path, encoding="utf-8", newline="") as handle:
        return next(csv.reader(handle, delimiter="\t"), [])


def needed_columns(spec: BenchSpec, columns: list[str]) -> list[tuple[str, str]]:
    """Returns (column, why it is needed) for each column ``spec`` reads that ``columns`` lacks."""
    layout = spec.layout
    missing = [(c, "VLMEvalKit's layout has it in every benchmark file") for c in missing_columns(columns)]
    for gold in layout.gold_column.split("|"):  # ``a|b``: the first non-empty of a and b (``gold_cell``)
        if gold not in columns and gold not in dict(missing):
            missing.append((gold, f"bench.{spec.name}.layout.gold_column reads the gold answer there"))
    if layout.options in ("list", "lines") and layout.options_column not in columns:
        missing.append((layout.options_column, f"bench.{spec.name}.layout.options_column holds the options"))
    letters = [c for c in columns if len(c) == 1 and c in string.ascii_uppercase]
    if layout.options == "columns" and SCORERS.get(spec.scorer).needs_options and len(letters) < 2:
        missing.append(("A", f"scorer {spec.scorer} asks multiple-choice questions: options in columns A, B, ..."))
    if spec.video is not None and not any(c in columns for c in VIDEO_COLUMNS):
        missing.append(("video", "a video benchmark names each row's clip there (or embeds it in 'frames')"))
    if spec.video is not None:
        video = spec.video
        for key in ("prefix_column", "suffix_column", "bound_column", "start_column", "end_column"):
            column = getattr(video, key, "")
            if column and column not in columns:
                missing.append((column, f"bench.{spec.name}.video.{key} reads the clip's path or window there"))
    return missing


def check_benchmark(spec: BenchSpec) -> Checked:
    """Returns what the benchmark's file(s) hold and every problem found (each file read once)."""
    checked = Checked("benchmark", spec.name, spec.path or " + ".join(spec.layout.files))
    try:
        paths = bench_files(spec)
    except FileNotFoundError as error:
        where = str(error).split(" at ", 1)[1].split(" (bench.", 1)[0] if " at " in str(error) else checked.file
        checked.add(
            where,
            f"benchmark {spec.name!r}: file {' + '.join(spec.layout.files)} not found",
            how_to_get(spec) + f"; or set $LMUData, or bench.{spec.name}.path=<file or folder>",
        )
        return checked
    checked.file = ", ".join(map(str, paths))
    rows = dropped = 0
    for path in paths:
        missing = needed_columns(spec, header(path))
        for column, why in missing:
            checked.add(
                path,
                f"no column {column!r} ({why})",
                f"use the file VLMEvalKit writes for "
                f"{spec.dataset_name}, or point bench.{spec.name}.layout (or .video) at the file's columns",
                column=column,
            )
        if missing:
            continue
        items, skips, drops = read_rows(path, drop_no_image="no_image" in spec.layout.drop_rows)
        items, unmapped = apply_layout(items, spec.layout)
        for skip in [*skips, *unmapped]:
            row_problem(checked, path, skip, spec)
        _options_and_clips(checked, spec, path, items)
        rows, dropped = rows + len(items), dropped + len(drops)
    drop_note = f", {dropped} dropped as VLMEvalKit drops them ({', '.join(spec.layout.drop_rows)})" if dropped else ""
    checked.facts.append(f"{rows} usable rows{drop_note}")
    return checked


def _options_and_clips(checked: Checked, spec: BenchSpec, path: Path, items: list[Item]) -> None:
    """Records multiple-choice rows without options and video rows whose clip is not there."""
    if SCORERS.get(spec.scorer).needs_options:
        where = spec.layout.options_column or "A"
        for item in items:
            if not item.options:
                checked.add(
                    path,
                    f"no options, but scorer {spec.scorer} scores multiple choice",
                    f"put the row's options in {'columns A, B, ...' if where == 'A' else repr(where)}, or delete "
                    "the row",
                    item.index,
                    where,
                )
    if spec.video is None:
        return
    source = video_source(spec, path)
    for item in items:
        problem = clip_problem(item, source)
        if problem:
            fix = (
                f"put the clip there (VLMEvalKit's {spec.dataset_name} download, or the dataset's own), or set "
                f"bench.{spec.name}.video.root to the folder holding the clips"
            )
            checked.add(path, problem, fix, item.index, "frames" if item.frames else "video")


def how_to_get(spec: BenchSpec) -> str:
    """Returns how to get a benchmark's file(s): the build command, or VLMEvalKit's download under its name."""
    if spec.layout.source.startswith("sparsectx"):
        return f"build the synthetic suite: `{BUILD_COMMAND}`"
    if spec.video is not None:
        return (
            f"VLMEvalKit's {spec.dataset_name} class downloads the dataset and writes {' + '.join(spec.layout.files)} "
            f'beside its clips (python -c "from vlmeval.dataset import build_dataset; '
            f"build_dataset('{spec.dataset_name}')\"); point bench.{spec.name}.path at that folder "
            f"(conf/bench/{spec.name}.yaml says where it lands)"
        )
    return (
        f"VLMEvalKit downloads {spec.dataset_name} as {' + '.join(spec.layout.files)} into $LMUData when it first "
        f"runs it (python -c \"from vlmeval.dataset import build_dataset; build_dataset('{spec.dataset_name}')\")"
    )
