"""The image bytes of drawn candidates, each checked to exist, decode within the media limits (format, pixels:
``sparsectx.data.media``) and be large enough for the processor.

Files are read as they are (JPEG stays JPEG): the TSV's base64 cell is the downloaded file, so the same
download gives the same bytes. Parquet images are read per row group, one read for all drawn rows of it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparsectx.data.media import FormatNotAllowedError, MediaError, TooManyPixelsError, check_decodes
from sparsectx.data.sources.records import Embedded


@dataclass(frozen=True)
class Loaded:
    """One candidate's image: its bytes, or the counted reason and the detail why it is unusable."""

    data: bytes | None
    reason: str
    detail: str


def load_images(refs: list[Path | Embedded], image_field: str, min_side: int, max_ratio: float) -> list[Loaded]:
    """Returns one ``Loaded`` per reference, in order: checked bytes, or why the image cannot be used."""
    embedded = _embedded_bytes([ref for ref in refs if isinstance(ref, Embedded)], image_field)
    out = []
    for ref in refs:
        if isinstance(ref, Embedded):
            data = embedded[ref]
            if data is None:
                out.append(Loaded(None, "image missing", f"the embedded image of {ref.file} has no bytes"))
                continue
        else:
            if not ref.is_file():
                out.append(Loaded(None, "image missing", f"image file {ref} does not exist"))
                continue
            data = ref.read_bytes()
        out.append(check_image(data, min_side, max_ratio))
    return out


def check_image(data: bytes, min_side: int, max_ratio: float) -> Loaded:
    """Returns ``Loaded(data)`` when the bytes decode within the media limits to an image at least ``min_side`` px
    on each side and no more than ``max_ratio`` times longer than wide (or the reverse); else the counted reason
    (``image format not allowed``, ``image too large``, ``image does not decode``, ...)."""
    try:
        size = check_decodes(data, "image")  # a truncated file fails here, not in the training loop
    except FormatNotAllowedError as error:
        return Loaded(None, "image format not allowed", str(error))
    except TooManyPixelsError as error:
        return Loaded(None, "image too large", str(error))
    except MediaError as error:  # any decoder failure on downloaded bytes is a counted skip, never a crash
        return Loaded(None, "image does not decode", str(error))
    if min(size) < min_side:
        return Loaded(None, "image too small", f"{size[0]}x{size[1]} px, below min_image_side={min_side}")
    if max(size) / min(size) > max_ratio:
        return Loaded(None, "image too elongated", f"{size[0]}x{size[1]} px, beyond max_aspect_ratio={max_ratio}")
    return Loaded(data, "", "")


def _embedded_bytes(refs: list[Embedded], image_field: str) -> dict[Embedded, bytes | None]:
    """Returns the bytes of each embedded image, reading each (file, row group) once."""
    if not refs:
        return {}
    import pyarrow.parquet as pq  # imported here: JSON sources never load pyarrow

    groups: dict[tuple[Path, int], list[Embedded]] = defaultdict(list)
    for ref in refs:
        groups[(ref.file, ref.row_group)].append(ref)
    out: dict[Embedded, bytes | None] = {}
    for (file, group), members in sorted(groups.items(), key=lambda item: (str(item[0][0]), item[0][1])):
        column = pq.ParquetFile(file).read_row_group(group, columns=[image_field]).column(0)
        for ref in members:
            cell = column[ref.offset].as_py()
            out[ref] = _cell_bytes(cell if ref.position is None else cell[ref.position])
    return out


def _cell_bytes(cell: Any) -> bytes | None:
    """Returns the bytes of a Hugging Face ``Image`` cell (``{"bytes": ..., "path": ...}``) or raw bytes."""
    if isinstance(cell, dict):
        cell = cell.get("bytes")
    return cell if isinstance(cell, bytes) and cell else None
