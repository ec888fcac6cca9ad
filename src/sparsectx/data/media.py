"""Bounded decoding of untrusted images and video frames: the one place every decoder in the project goes through.

Benchmark TSVs, training downloads and video folders come from the internet. ``conf/data/media/limits.yaml``
(``MediaConfig``) bounds what decoding them may do:

- ``image_formats``: ``Image.open`` tries only these formats' plugins, so an EPS cell never reaches Ghostscript
  and none of Pillow's ~40 other decoders runs on a cell; a refused format is named from its magic bytes alone.
- ``max_image_pixels``: an image's (or frame's) header is read before any pixel is decoded; more pixels than
  this is refused before the decoder allocates them.
- ``max_frame_pixels``: a video frame above it is downscaled as it decodes (``fit_frame``), so no
  full-resolution frames accumulate.
- ``decode_budget_mib``: the decoded bytes the items of one engine call hold at once (``decode_chunks`` splits a
  call above it; ``check_decoded_bytes`` refuses one row above it).

Every refusal is a ``MediaError`` whose message starts with what was refused (``where``: ``image``, ``row 7 image
2``, ``<file>: frame``) and names the value and the setting to change; the readers turn it into a counted
``Skip``. ``video_formats`` is applied where clips are opened (``sparsectx.data.video``).
"""

from __future__ import annotations

import io
import logging
import math
import re
from collections.abc import Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from PIL import Image

from sparsectx.data.config import MediaConfig, load_media_config

if TYPE_CHECKING:
    from sparsectx.data.tsv import Item
    from sparsectx.data.video import VideoSource

log = logging.getLogger(__name__)
SETTINGS = "conf/data/media/limits.yaml"
"""Where the limits are set, as messages name it."""
_MEMORY_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
MIB = 2**20


class MediaError(ValueError):
    """An image or clip that may not or cannot be decoded: the message names where, the value and the fix."""


class FormatNotAllowedError(MediaError):
    """An image in a format outside ``image_formats``."""


class TooManyPixelsError(MediaError):
    """An image or frame whose header claims more than ``max_image_pixels`` pixels."""


@cache
def media_limits() -> MediaConfig:
    """Returns the media limits of ``conf/data/media/limits.yaml``, read once per process."""
    return load_media_config()


def _claimed_format(head: bytes) -> str:
    """Returns the Pillow format whose magic bytes ``head`` starts with ("" for none), running no plugin's parser."""
    Image.init()
    for name, (_, accept) in Image.OPEN.items():
        try:
            if accept is not None and accept(head):
                return name
        except Exception:  # an accept check on odd bytes is a non-match, like Image.open treats it
            continue
    return ""


def open_image(source: bytes | Path, where: str) -> Image.Image:
    """Returns the image of ``source`` opened (header read, no pixel decoded) once its format is one of
    ``image_formats`` and its size within ``max_image_pixels``; use it as a context manager.

    Raises:
        FormatNotAllowedError: the bytes are in a format outside ``image_formats``.
        TooManyPixelsError: the header claims more than ``max_image_pixels`` pixels.
        MediaError: the bytes are no image format, or the header does not parse.
    """
    limits = media_limits()
    stream = io.BytesIO(source) if isinstance(source, bytes) else source
    try:
        image = Image.open(stream, formats=limits.image_formats)
    except Image.UnidentifiedImageError as error:
        head = source[:64] if isinstance(source, bytes) else _head(source)
        claimed = _claimed_format(head)
        if not claimed:
            raise MediaError(f"{where} does not decode (no image format's signature matches its bytes)") from error
        if claimed in limits.image_formats:  # an allowed format whose header its plugin could not parse
            raise MediaError(f"{where} does not decode (its {claimed} header does not parse)") from error
        raise FormatNotAllowedError(
            f"{where} is in format {claimed}, not one of image_formats={list(limits.image_formats)} ({SETTINGS}); "
            "add the format there to read such images"
        ) from error
    except Image.DecompressionBombError as error:
        raise TooManyPixelsError(
            f"{where} is too large ({error}), above max_image_pixels={limits.max_image_pixels} ({SETTINGS})"
        ) from error
    except Exception as error:  # any header parser failure on untrusted bytes names the source
        raise MediaError(f"{where} does not decode (its header: {_detail(error)})") from error
    width, height = image.size
    if width * height > limits.max_image_pixels:
        image.close()
        raise TooManyPixelsError(
            f"{where} is {width}x{height} = {width * height:,} pixels, above max_image_pixels="
            f"{limits.max_image_pixels} ({SETTINGS}); raise it to read such images"
        )
    return image


def _head(path: Path) -> bytes:
    """Returns the first bytes of ``path`` (b"" when it cannot be read): enough for any format's magic bytes."""
    try:
        with open(path, "rb") as handle:
            return handle.read(64)
    except OSError:
        return b""


def _detail(error: Exception) -> str:
    """Returns ``Type: message`` of a decoder error, without the memory addresses PIL names its buffers by."""
    return f"{type(error).__name__}: {_MEMORY_ADDRESS.sub('', str(error))}"


def decode_image(source: bytes | Path, where: str) -> Image.Image:
    """Returns the image of ``source`` decoded in RGB, within the limits (``open_image``).

    Raises:
        MediaError: refused by ``open_image``, or the data does not decode (truncated, corrupt).
    """
    with open_image(source, where) as image:
        try:
            return image.convert("RGB")
        except Exception as error:  # any decoder failure on untrusted bytes names the source
            raise MediaError(f"{where} does not decode ({_detail(error)})") from error


def check_decodes(data: bytes, where: str) -> tuple[int, int]:
    """Returns the (width, height) of ``data`` after decoding it once: a truncated or corrupt file fails here, when
    its row is read, not later in the model.

    Raises:
        MediaError: refused by ``open_image``, or the data does not decode.
    """
    with open_image(data, where) as image:
        try:
            image.load()
        except Exception as error:  # any decoder failure on untrusted bytes names the source
            raise MediaError(f"{where} does not decode ({_detail(error)})") from error
        return image.size


def fitted_size(size: tuple[int, int]) -> tuple[int, int]:
    """Returns ``size`` scaled down (aspect kept, each side >= 1) to at most ``max_frame_pixels`` pixels; ``size``
    itself when it is within."""
    width, height = size
    cap = media_limits().max_frame_pixels
    if width * height <= cap:
        return size
    scale = math.sqrt(cap / (width * height))
    fitted = [max(1, math.floor(side * scale)) for side in size]
    if fitted[0] * fitted[1] > cap:  # a side held at 1 px: the other takes what the cap leaves
        longer = 0 if fitted[0] >= fitted[1] else 1
        fitted[longer] = cap // fitted[1 - longer]
    return fitted[0], fitted[1]


def fit_frame(frame: Image.Image) -> Image.Image:
    """Returns ``frame`` downscaled to ``fitted_size`` (bicubic, the filter frames are resized with for the
    processor), or ``frame`` itself when it is within ``max_frame_pixels``."""
    size = fitted_size(frame.size)
    return frame if size == frame.size else frame.resize(size, Image.Resampling.BICUBIC)


def check_decoded_bytes(decoded: int, where: str) -> None:
    """Returns None when ``decoded`` bytes fit ``decode_budget_mib``; a row beyond it alone cannot be decoded in
    any engine call.

    Raises:
        MediaError: naming the row, its decoded size and the setting.
    """
    budget = media_limits().decode_budget_mib
    if decoded > budget * MIB:
        raise MediaError(
            f"{where} decodes to {decoded / MIB:,.0f} MiB, above decode_budget_mib={budget:g} ({SETTINGS}) on its "
            "own; raise it to read such rows"
        )


def image_bytes_decoded(data: bytes) -> int:
    """Returns the RGB bytes ``data`` decodes to, from its header (0 when it has none; decoding it then fails)."""
    try:
        with open_image(data, "budget") as image:
            return 3 * image.size[0] * image.size[1]
    except MediaError:
        return 0


def item_decoded_bytes(item: Item, video: VideoSource | None) -> int:
    """Returns the RGB bytes decoding ``item`` for a prompt holds: its images from their headers, or a video row's
    ``video.frames`` sampled frames at ``max_frame_pixels`` each (an upper bound that opens no clip)."""
    if video is not None:
        return 3 * video.frames * media_limits().max_frame_pixels
    return sum(image_bytes_decoded(data) for data in (item.image_bytes, *item.more_images))


def decode_chunks(items: Sequence[Item], queue_size: int, video: VideoSource | None) -> Iterator[list[Item]]:
    """Yields the engine calls of ``items``: ``queue_size`` items each, a call whose items would decode to more
    than ``decode_budget_mib`` split into consecutive runs within it.

    Splitting keeps every run inside its ``queue_size`` call, so a sharded run (whole calls per shard) makes the
    same calls as one process; a budget that never binds gives the ``queue_size`` calls unchanged.
    """
    budget = media_limits().decode_budget_mib * MIB
    for start in range(0, len(items), queue_size):
        call = list(items[start : start + queue_size])
        sizes = [item_decoded_bytes(item, video) for item in call]
        if sum(sizes) > budget:
            log.info(
                "items %d-%d decode to %.0f MiB, above decode_budget_mib=%g (%s): split into smaller engine calls",
                start,
                start + len(call) - 1,
                sum(sizes) / MIB,
                budget / MIB,
                SETTINGS,
            )
        run: list[Item] = []
        held = 0
        for item, size in zip(call, sizes, strict=True):
            if run and held + size > budget:
                yield run
                run, held = [], 0
            run.append(item)
            held += size
        yield run
