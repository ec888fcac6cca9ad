"""Benchmark files in VLMEvalKit's TSV layout: one reader for synthetic and real files, one atomic writer.

Columns: ``index`` (an integer, or for files such as VLMEvalKit's HallusionBench a string, kept as
written), ``image`` (base64 of the encoded image, or for real files the index of the row whose image it
shares), ``question``, option columns ``A``…``D`` where a file has multiple choice,
``answer``, ``category``, then ours: ``family``, ``subset`` (POPE's random/popular/adversarial),
``trace`` (reference ``<think>…</think><answer>…</answer>``) and ``scene`` (JSON of what was drawn).
Other columns of real files (``hint``, ``l2-category``, …) are kept in ``Item.extra``.

Video rows: ``frames`` (a JSON list of base64 frames, the synthetic video family's) or ``video`` (a video
file or frame folder, as the benchmark's config resolves it) stands in for ``image``, which such a file may
lack or leave empty; the clip's rate is the ``fps`` column (kept in ``Item.extra``). Options kept elsewhere
than option columns (VLMEvalKit's ``candidates`` lists) are the benchmark layout's business
(``sparsectx.data.layout``).

A bad row never stops the reader and is never dropped silently: ``read_rows`` returns the good items, a
``Skip(index, reason)`` for every row it could not use, and apart from those the rows a drop rule removes
(rows VLMEvalKit itself drops, such as HallusionBench's text-only rows without an image). The files are
untrusted: every image is decoded within the media limits (``sparsectx.data.media``: allowed formats, a pixel cap
read from the header, a decode budget), and a list cell is read by ``literal_cell``, which nothing a cell holds
makes raise.
"""

from __future__ import annotations

import ast
import base64
import binascii
import csv
import hashlib
import io
import json
import string
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

from PIL import Image

from sparsectx.data.media import (
    MediaError,
    check_decoded_bytes,
    check_decodes,
    decode_image,
    image_bytes_decoded,
    open_image,
)
from sparsectx.data.render import pixel_hash
from sparsectx.io import atomic_write_bytes

REQUIRED_COLUMNS = ("index", "image", "question", "answer")
OPTION_COLUMNS = ("A", "B", "C", "D")
OUR_COLUMNS = ("family", "subset", "trace", "scene")
FRAMES_COLUMN, VIDEO_COLUMN, FPS_COLUMN, CANDIDATES_COLUMN = "frames", "video", "fps", "candidates"
VIDEO_COLUMNS = (FRAMES_COLUMN, VIDEO_COLUMN)
"""Either column makes a row a video row (``image`` may then be absent or empty)."""
# VLMEvalKit writes a shared image as the index of the row that holds it: a cell of at most 64 characters
# (ImageBaseDataset.__init__ reads every such cell as a reference).
_MAX_REFERENCE_LENGTH = 64


@dataclass(frozen=True)
class Item:
    """One benchmark or training row.

    Attributes:
        index: the row's ``index`` (unique within a file): an int when the cell is an integer, else the string
            as written (VLMEvalKit's HallusionBench ids, ``<category>_<l2>_..._<set>_<figure>_<question>``).
        image_bytes: the encoded image (PNG for synthetic files), already checked to decode.
        question: the question without its options.
        options: option letter -> text, only the non-empty option columns; empty for open questions.
        answer: the reference answer (an option letter for multiple choice).
        category: the file's ``category`` column (POPE: the subset), "" when absent.
        family: synthetic task family, "" for real files.
        subset: POPE subset (random, popular, adversarial), "" otherwise.
        trace: reference ``<think>…</think><answer>…</answer>``, "" for real files.
        scene: JSON of the drawn scene (``sparsectx.data.scenes.Scene``), "" for real files.
        extra: every other column of the file, by name.
        frames: a video row's encoded frames (the ``frames`` column), each checked to decode; () otherwise.
        more_images: a multi-image row's images after the first (its ``image`` cell a list), in order.
        video: a video row's ``video`` cell (a file or frame folder name), "" otherwise.
    """

    index: int | str
    image_bytes: bytes
    question: str
    options: dict[str, str]
    answer: str
    category: str
    family: str
    subset: str
    trace: str
    scene: str
    extra: dict[str, str]
    frames: tuple[bytes, ...] = ()
    video: str = ""
    more_images: tuple[bytes, ...] = ()

    def image(self) -> Image.Image:
        """Returns the decoded image in RGB, within the media limits (``sparsectx.data.media``).

        Raises:
            MediaError: the image is refused by the media limits or does not decode (naming the row).
        """
        return decode_image(self.image_bytes, f"row {self.index} image")

    def thumbnail(self) -> Image.Image | None:
        """Returns the row's image, or a video row's first embedded frame (None for a video-file row), opened
        within the media limits: the picture a predictions table shows."""
        data = self.image_bytes or (self.frames[0] if self.frames else b"")
        return open_image(data, f"row {self.index} image") if data else None

    def images(self) -> list[Image.Image]:
        """Returns every image of the row in order, decoded in RGB (one unless it is a multi-image row).

        Raises:
            MediaError: an image is refused by the media limits or does not decode (naming the row and image).
        """
        more = [decode_image(data, f"row {self.index} image {n}") for n, data in enumerate(self.more_images, 1)]
        return [self.image(), *more]

    def content_hash(self) -> str:
        """Returns sha256 of the image (or every frame's) pixels and the question: equal hashes mean the same
        test content."""
        if not self.frames:
            return content_hash(pixel_hash(self.image()), self.question)
        frames = [decode_image(data, f"row {self.index} frame {n}") for n, data in enumerate(self.frames)]
        return content_hash(frames_hash(frames), self.question)


def frames_hash(frames: list[Image.Image]) -> str:
    """Returns the digest of a clip's frames: sha256 over their ``render.pixel_hash`` digests in order."""
    return hashlib.sha256(":".join(pixel_hash(frame) for frame in frames).encode()).hexdigest()


def content_hash(image_digest: str, question: str) -> str:
    """Returns the content hash of an item from ``render.pixel_hash`` of its image and its question."""
    return hashlib.sha256(f"{image_digest}\n{question}".encode()).hexdigest()


class Skip(NamedTuple):
    """A row the reader could not use: its index as written (or ``line N`` when unreadable) and why."""

    index: str
    reason: str


def columns_for(items: list[Item]) -> list[str]:
    """Returns the header for ``items``: option columns only when some item has options."""
    options = list(OPTION_COLUMNS) if any(item.options for item in items) else []
    extra = sorted({key for item in items for key in item.extra})
    used = {FRAMES_COLUMN: any(item.frames for item in items), VIDEO_COLUMN: any(item.video for item in items)}
    video = [name for name in VIDEO_COLUMNS if used[name]]
    return ["index", "image", *video, "question", *options, "answer", "category", *OUR_COLUMNS, *extra]


def write_tsv(path: Path, items: list[Item]) -> None:
    """Returns None after atomically writing ``items`` to ``path`` in VLMEvalKit's TSV layout."""
    header = columns_for(items)
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter="\t", lineterminator="\n")
    writer.writerow(header)
    for item in items:
        cells = {
            "index": str(item.index),
            "image": _image_cell(item),
            "question": item.question,
            "answer": item.answer,
            "category": item.category,
            "family": item.family,
            "subset": item.subset,
            "trace": item.trace,
            "scene": item.scene,
            FRAMES_COLUMN: json.dumps([base64.b64encode(f).decode("ascii") for f in item.frames])
            if item.frames
            else "",
            VIDEO_COLUMN: item.video,
            **item.options,
            **item.extra,
        }
        writer.writerow([cells.get(column, "") for column in header])
    atomic_write_bytes(path, buffer.getvalue().encode("utf-8"))


def _image_cell(item: Item) -> str:
    """Returns the ``image`` cell: base64 of the image, or for a multi-image row the list of them."""
    cells = [base64.b64encode(data).decode("ascii") for data in (item.image_bytes, *item.more_images)]
    return cells[0] if not item.more_images else json.dumps(cells)


def _decode_image(text: str) -> tuple[bytes | None, str]:
    """Returns (image bytes, "") when ``text`` is base64 of an image that decodes within the media limits (format,
    pixels: ``sparsectx.data.media``), else (None, why not)."""
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as error:
        return None, f"image is not valid base64 ({error})"
    try:
        check_decodes(data, "image")  # a truncated or corrupt file fails here, not later in the model
    except MediaError as error:  # a refused or undecodable image is a skipped row, never a crash
        return None, str(error)
    return data, ""


def literal_cell(text: str) -> tuple[object, str]:
    """Returns (the Python literal a cell holds, "") or (None, the error's name): VLMEvalKit writes lists into
    cells as their ``repr`` and reads them back with ``eval``; ``ast.literal_eval`` reads them without running
    code, and whatever a crafted cell makes it raise (``RecursionError`` on deep nesting, ``MemoryError``) is a
    reason the caller reports, never a crash."""
    try:
        return ast.literal_eval(text), ""
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as error:
        return None, type(error).__name__


def _rows(handle: io.TextIOBase, skips: list[Skip]) -> Iterable[tuple[str, list[str]]]:
    """Yields (line span, fields) per record; a quoted field can span lines, so the span is reported."""
    reader = csv.reader(handle, delimiter="\t")
    while True:
        first = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            skips.append(Skip(f"line {reader.line_num}", f"line {reader.line_num}: unparseable TSV ({error})"))
            continue
        span = f"line {first}" if reader.line_num == first else f"lines {first}-{reader.line_num}"
        if row:
            yield span, row


def _decode_frames(text: str, what: str = "frame") -> tuple[tuple[bytes, ...] | None, str]:
    """Returns (image bytes, "") when ``text`` is a list (JSON or Python literal) of decodable base64 images,
    else (None, why not); ``what`` names an element in the reason (``frame``, ``image``)."""
    cells, error = literal_cell(text)
    if error:
        return None, f"{what}s cell is not a list ({error})"
    if not isinstance(cells, list) or not cells or not all(isinstance(c, str) for c in cells):
        return None, f"{what}s cell is not a non-empty list of base64 strings"
    decoded = []
    for number, cell in enumerate(cells):
        data, problem = _decode_image(cell)
        if data is None:
            return None, f"{what} {number}: {problem}"
        decoded.append(data)
    return tuple(decoded), ""


def _item(
    cells: dict[str, str], index: int | str, image: bytes, letters: list[str], frames: tuple[bytes, ...] = ()
) -> Item:
    known = {*REQUIRED_COLUMNS, *letters, "category", *OUR_COLUMNS, *VIDEO_COLUMNS}
    return Item(
        index=index,
        image_bytes=image,
        question=cells["question"],
        options={k: cells[k] for k in letters if cells[k].strip() and cells[k] != "nan"},
        answer=cells["answer"],
        category=cells.get("category", ""),
        family=cells.get("family", ""),
        subset=cells.get("subset", ""),
        trace=cells.get("trace", ""),
        scene=cells.get("scene", ""),
        extra={k: v for k, v in cells.items() if k not in known},
        frames=frames,
        video=cells.get(VIDEO_COLUMN, "").strip(),
    )


class TsvRows(NamedTuple):
    """What ``read_rows`` found in one file: usable items, unusable rows, and rows a drop rule removed."""

    items: list[Item]
    skips: list[Skip]
    dropped: list[Skip]


def read_tsv(path: Path) -> tuple[list[Item], list[Skip]]:
    """Returns the usable items of a VLMEvalKit-layout TSV and a ``Skip`` for every row left out (no row is
    dropped by a rule: see ``read_rows``)."""
    items, skips, _ = read_rows(path, drop_no_image=False)
    return items, skips


def read_rows(path: Path, drop_no_image: bool) -> TsvRows:
    """Returns the usable items of a VLMEvalKit-layout TSV, a ``Skip`` for every row left out, and the rows
    dropped by rule.

    A row is skipped (never fatal) when it cannot be parsed, has the wrong number of fields, an empty or
    repeated index, an empty question or answer, an image that is not valid base64, does not decode or is
    refused by the media limits (a format outside ``image_formats``, more than ``max_image_pixels``, images
    alone above ``decode_budget_mib``), a list cell that is no list, or a reference to a row whose image is
    missing. With ``drop_no_image`` an image row whose ``image`` cell
    is empty is dropped instead, as VLMEvalKit's ``ImageBaseDataset.__init__`` drops it (``skip_noimg``).

    Raises:
        ValueError: the header lacks a required column (the whole file is unusable).
    """
    csv.field_size_limit(2**31 - 1)  # base64 images are far longer than csv's default 128 KiB field
    skips: list[Skip] = []
    dropped: list[Skip] = []
    with open(path, encoding="utf-8", newline="") as handle:
        rows = _rows(handle, skips)
        header = next((row for _, row in rows), None)
        if header is None or missing_columns(header):
            raise ValueError(f"{path}: header lacks columns {missing_columns(header or [])}; found {header}")
        letters = [c for c in header if len(c) == 1 and c in string.ascii_uppercase]
        parsed: list[tuple[str, dict[str, str]]] = []
        seen: set[int | str] = set()
        for line, row in rows:
            label = row[0] if row[0].strip() else line
            if len(row) != len(header):
                skips.append(Skip(label, f"{line}: {len(row)} fields, header has {len(header)}"))
                continue
            cells = dict(zip(header, row, strict=True))
            if drop_no_image and _without_image(cells):
                dropped.append(Skip(label, f"{line}: no image (VLMEvalKit drops such rows: skip_noimg)"))
                continue
            reason = _row_problem(cells, seen)
            if reason:
                skips.append(Skip(label, f"{line}: {reason}"))
                continue
            seen.add(parse_index(cells["index"]))
            parsed.append((line, cells))
    return TsvRows(_resolve_images(parsed, letters, skips), skips, dropped)


def _without_image(cells: dict[str, str]) -> bool:
    """Returns whether an image row's ``image`` cell is empty (``nan`` as pandas writes a missing cell)."""
    if any(cells.get(column, "").strip() for column in VIDEO_COLUMNS) or "image" not in cells:
        return False
    return cells["image"].strip() in ("", "nan")


def missing_columns(header: list[str]) -> list[str]:
    """Returns the required columns that ``header`` lacks (``image`` is optional beside a video column)."""
    optional = {"image"} if any(column in header for column in VIDEO_COLUMNS) else set()
    return [column for column in REQUIRED_COLUMNS if column not in header and column not in optional]


def parse_index(cell: str) -> int | str:
    """Returns a row's index: an int when the cell is an integer (VLMEvalKit's files mostly), else the
    stripped string (HallusionBench's ``_``-separated ids), as VLMEvalKit keeps a non-integer index."""
    text = cell.strip()
    try:
        return int(text)
    except ValueError:
        return text


def _row_problem(cells: dict[str, str], seen: set[int | str]) -> str:
    index = parse_index(cells["index"])
    if index == "":
        return "empty index"
    if index in seen:
        return f"index {index} repeats an earlier row"
    for column in ("question", "answer"):
        if not cells[column].strip():
            return f"empty {column}"
    return ""


def _resolve_images(parsed: list[tuple[str, dict[str, str]]], letters: list[str], skips: list[Skip]) -> list[Item]:
    images: dict[int | str, bytes] = {}
    references: list[tuple[str, dict[str, str]]] = []
    items: dict[int | str, Item] = {}
    indexes = {parse_index(cells["index"]) for _, cells in parsed}
    for line, cells in parsed:
        index, text = parse_index(cells["index"]), cells.get("image", "").strip()
        if _video_row(cells, index, line, letters, items, skips):
            continue
        if len(text) <= _MAX_REFERENCE_LENGTH and (text.isdigit() or text in indexes):
            references.append((line, cells))
            continue
        if text.startswith("["):  # VLMEvalKit's multi-image rows (MuirBench): a list of base64 images
            decoded, problem = _decode_frames(text, "image")
        else:
            data, problem = _decode_image(text)
            decoded = None if data is None else (data,)
        problem = problem or _budget_problem(decoded or ())
        if decoded is None or problem:
            skips.append(Skip(str(index), f"{line}: {problem}"))
            continue
        images[index] = decoded[0]
        items[index] = replace(_item(cells, index, decoded[0], letters), more_images=decoded[1:])
    for line, cells in references:
        index, target = parse_index(cells["index"]), parse_index(cells["image"])
        if target not in images:
            skips.append(Skip(str(index), f"{line}: image refers to row {target}, which has no usable image"))
            continue
        items[index] = _item(cells, index, images[target], letters)
    order = [parse_index(cells["index"]) for _, cells in parsed]
    return [items[i] for i in order if i in items]


def _budget_problem(images: tuple[bytes, ...]) -> str:
    """Returns why a row's images cannot be decoded in any engine call (alone above ``decode_budget_mib``), or ""."""
    try:
        check_decoded_bytes(sum(image_bytes_decoded(data) for data in images), "row")
    except MediaError as error:
        return str(error)
    return ""


def _video_row(
    cells: dict[str, str],
    index: int | str,
    line: str,
    letters: list[str],
    items: dict[int | str, Item],
    skips: list[Skip],
) -> bool:
    """Returns whether the row is a video row, after adding its item (or its ``Skip``)."""
    frames_cell, video_cell = cells.get(FRAMES_COLUMN, "").strip(), cells.get(VIDEO_COLUMN, "").strip()
    if not frames_cell and not video_cell:
        return False
    frames: tuple[bytes, ...] = ()
    if frames_cell:
        decoded, problem = _decode_frames(frames_cell)
        if decoded is None:
            skips.append(Skip(str(index), f"{line}: {problem}"))
            return True
        frames = decoded
    items[index] = _item(cells, index, b"", letters, frames)
    return True
