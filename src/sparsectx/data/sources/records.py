"""Rows of downloaded dataset files (JSON array, JSON lines, parquet), each labelled by its file and position.

A row that cannot be parsed is yielded with a ``problem`` instead of being dropped, so the builder counts
it against the skip budget and can name it. Parquet images stay on disk: the image cell of a row becomes an
``Embedded`` reference (file, row group, offset) and its bytes are read only for the rows drawn.
"""

from __future__ import annotations

import glob
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Embedded:
    """An image stored inside a parquet file: its row group, offset in that group and list position."""

    file: Path
    row_group: int
    offset: int
    position: int | None
    """Index in the row's image list, or None when the cell is one image struct."""


@dataclass(frozen=True)
class RawRow:
    """One row as read: the file, where in it (``line 7``, ``element 3``, ``row 12``), and its content."""

    file: Path
    label: str
    record: dict[str, Any] | None
    problem: str
    """Why the row could not be read ("" when ``record`` is usable)."""


def resolve_files(patterns: list[str], key: str) -> list[Path]:
    """Returns the sorted files that ``patterns`` name; raises FileNotFoundError naming ``key`` for a miss."""
    files: set[Path] = set()
    for pattern in patterns:
        matched = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        found = [Path(path) for path in matched if Path(path).is_file()]
        if not found:
            raise FileNotFoundError(
                f"{key}: {pattern!r} names no file (looked from {Path.cwd()}); download the dataset there or "
                f"set {key}=[<path>, ...]"
            )
        files.update(found)
    return sorted(files)


def read_rows(path: Path, file_format: str, image_field: str) -> Iterator[RawRow]:
    """Yields every row of ``path`` in file order (parquet image cells replaced by ``Embedded``)."""
    if file_format == "jsonl":
        yield from _jsonl_rows(path)
    elif file_format == "json":
        yield from _json_rows(path)
    else:
        yield from _parquet_rows(path, image_field)


def _object_row(path: Path, label: str, value: Any) -> RawRow:
    if not isinstance(value, dict):
        return RawRow(path, label, None, f"not a JSON object ({type(value).__name__})")
    return RawRow(path, label, value, "")


def _parse_json(text: bytes) -> tuple[Any, str]:
    """Returns (the JSON value of ``text``, "") or (None, why it is not JSON): bytes that are not UTF-8, text that
    does not parse, or JSON nested deeper than the decoder's recursion limit (a crafted line's ``RecursionError``)."""
    try:
        return json.loads(text.decode("utf-8")), ""
    except UnicodeDecodeError as error:
        return None, f"not UTF-8 text: byte {text[error.start]:#04x} at offset {error.start}"
    except json.JSONDecodeError as error:
        return None, str(error)
    except (RecursionError, MemoryError) as error:
        return None, f"nested too deeply ({type(error).__name__})"


def _jsonl_rows(path: Path) -> Iterator[RawRow]:
    """Yields every non-blank line of a JSON-lines file; a line that does not parse is a problem row naming it."""
    with open(path, "rb") as handle:  # bytes: a line that is not UTF-8 is that row's problem, not the file's
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            value, problem = _parse_json(line)
            if problem:
                yield RawRow(path, f"line {number}", None, f"unparseable JSON ({problem})")
                continue
            yield _object_row(path, f"line {number}", value)


def _json_rows(path: Path) -> Iterator[RawRow]:
    """Yields the elements of a JSON array file; a file that is not one array raises (nothing is usable)."""
    value, problem = _parse_json(path.read_bytes())
    if problem:
        raise ValueError(f"{path}: not valid JSON ({problem}); the whole file is unusable")
    if not isinstance(value, list):
        raise ValueError(f"{path}: a JSON source must be one array of rows, found {type(value).__name__}")
    for number, element in enumerate(value):
        yield _object_row(path, f"element {number}", element)


def _parquet_rows(path: Path, image_field: str) -> Iterator[RawRow]:
    import pyarrow as pa  # imported here: JSON sources and --help never load pyarrow
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    schema = parquet.schema_arrow
    # an image column of Image structs (or lists of them) is embedded; a string column is a path (PixMo's sha256)
    kind = schema.field(image_field).type if image_field in schema.names else None
    embedded = kind is not None and not (pa.types.is_string(kind) or pa.types.is_large_string(kind))
    columns = [name for name in schema.names if not (embedded and name == image_field)]
    number = 0
    for group in range(parquet.num_row_groups):
        table = parquet.read_row_group(group, columns=columns)
        shapes = _image_shapes(parquet, group, image_field) if embedded else None
        for offset, record in enumerate(table.to_pylist()):
            if shapes is not None:
                record[image_field] = _embedded(path, group, offset, shapes[offset])
            yield RawRow(path, f"row {number}", record, "")
            number += 1


def _image_shapes(parquet: Any, group: int, image_field: str) -> list[int | None]:
    """Returns per row: None (no image), -1 (one image struct) or the length of the image list."""
    import pyarrow as pa

    column = parquet.read_row_group(group, columns=[image_field]).column(0).combine_chunks()
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
        return list(column.value_lengths().to_pylist())
    return [None if not valid else -1 for valid in column.is_valid().to_pylist()]


def _embedded(path: Path, group: int, offset: int, shape: int | None) -> Any:
    """Returns the image cell of a parquet row as references: None, one ``Embedded`` or a list of them."""
    if shape is None:
        return None
    if shape == -1:
        return Embedded(path, group, offset, None)
    return [Embedded(path, group, offset, position) for position in range(shape)]
