"""Videos as uniformly sampled frames: from a folder of pre-extracted frames or a video file (PyAV).

A ``Video`` is what the processor needs from a clip: its sampled frames (RGB, one size), where each frame
sits in the source (frame index) and the source's frame rate, from which the Qwen-VL families derive their
temporal positions (Qwen2.5-VL's seconds per temporal patch) and prompt timestamps (Qwen3-VL).

Which frames are taken is a benchmark's ``video.sampling`` rule (``SAMPLING_RULES``), each a pure function of
(frame count, frame rate, window, asked count), named after the VLMEvalKit function it restates (nvidia-vlmeval
26.3, checked index for index against that function in ``tests/eval/test_video_sampling.py``):

- ``save_video_frames``: ``VideoBaseDataset.save_video_frames`` (its ``nframe`` branch, repeated verbatim in
  ``VideoMME``, ``MLVU_MCQ``, ``TempCompass_MCQ`` and upstream ``VideoTT``): frame ``int(i * (total /
  (count + 1)))`` for i = 1..count. A clip shorter than ``count`` frames gives repeated frames, as there.
- ``get_index``: ``MVBench.get_index`` as ``MVBench.read_video`` (``first_idx`` 0, last frame ``total - 1``)
  and ``MVBench.read_frame`` (frame folders: files ``00001.jpg``.., ``first_idx`` 1, last frame ``total``)
  call it: the window (a bounded row's ``start``/``end`` seconds, else +-100000 s) runs from ``max(first_idx,
  round(start * fps))`` to ``min(round(end * fps), last)``, cut into ``count`` segments of ``seg`` frames, and
  segment k's frame is ``int(start + seg / 2 + round(seg * k))``: midpoints, repeated where the window has fewer
  frames than segments.
- ``strict``: ``save_video_frames``' frames, but a clip with fewer than ``count`` frames is refused (a counted
  skip), never scored on fewer or repeated ones: the project's own synthetic files (``tiny_video``).

A rule refuses a clip only where its VLMEvalKit function cannot read it either (no frames, or a window whose
frames lie outside the clip).

Where a row's clip is and which part of it is asked about is data (``VideoSource``, from ``bench.<name>.video``):
VLMEvalKit's video files keep a clip as ``<root>/<prefix cell>/<video cell><suffix>`` (MVBench, MLVU and
TempCompass carry a ``prefix`` folder per row; TempCompass also a ``suffix`` column), ``root`` being the folder
holding the benchmark file (``prepare_dataset`` returns that folder as ``data_root``). A row may name a window
of its clip (MVBench's ``bound``/``start``/``end`` in seconds); its frames are then sampled within the window
and the clip starts at the window's start, as the clip VLMEvalKit cuts from it.

Decoding video files uses PyAV (``av`` on PyPI: manylinux wheels with FFmpeg inside, CPU only, no
torchvision), which the project depends on for this reason. Any failure (a file that does not decode, a clip
its rule refuses, frames of different sizes) raises ``VideoError`` naming the file, which the benchmark reader
turns into a counted ``Skip``.

The files are untrusted, and decoding stays within the media limits (``sparsectx.data.media``,
``conf/data/media/limits.yaml``): a row's clip must lie inside ``root`` (its cells may not climb out with ``..``
or name an absolute path; symlinks the user placed under ``root`` are followed), a video file is opened only
through the demuxers of ``video_formats`` (a playlist would name other files), its frames and a folder's frame
files within ``max_image_pixels``, and every frame above ``max_frame_pixels`` is downscaled as it decodes
(PyAV converts it straight to the smaller size), so a clip's sampled frames never accumulate at full size.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from PIL import Image

from sparsectx.data.media import (
    SETTINGS,
    MediaError,
    check_decoded_bytes,
    decode_image,
    fit_frame,
    fitted_size,
    media_limits,
    open_image,
)
from sparsectx.data.tsv import FPS_COLUMN, Item

FRAME_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
"""Files a frame folder's frames may have; other files in the folder are ignored."""


class VideoError(MediaError):
    """A video that cannot be used: the message names the file and the reason."""


@dataclass(frozen=True)
class Video:
    """One clip as its sampled frames.

    Attributes:
        frames: the sampled frames in time order, RGB, all the same size.
        frame_indices: the index of each sampled frame in the source (same length as ``frames``).
        fps: frames per second of the source.
        total_frames: number of frames of the source.
        source: the file or folder the frames came from (named in every error).
        max_tokens: cap on the clip's post-merger visual tokens (a benchmark's ``video.max_tokens``); None =
            only the processor's per-frame pixel bounds apply.
    """

    frames: tuple[Image.Image, ...]
    frame_indices: tuple[int, ...]
    fps: float
    total_frames: int
    source: str
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if not self.frames or len(self.frames) != len(self.frame_indices):
            raise VideoError(f"{self.source}: {len(self.frames)} frames for {len(self.frame_indices)} frame indices")
        if not self.fps > 0:
            raise VideoError(f"{self.source}: fps={self.fps} must be > 0")
        sizes = {frame.size for frame in self.frames}
        if len(sizes) > 1:
            raise VideoError(f"{self.source}: frames differ in size {sorted(sizes)}; a video has one frame size")

    @property
    def sampled_fps(self) -> float:
        """Returns the rate of the sampled frames: sampled count over the source's duration in seconds."""
        return len(self.frames) / (self.total_frames / self.fps)

    def timestamps(self) -> list[float]:
        """Returns each sampled frame's time in seconds in the source (frame index / fps)."""
        return [index / self.fps for index in self.frame_indices]


STRICT, SAVE_VIDEO_FRAMES, GET_INDEX = "strict", "save_video_frames", "get_index"
SAMPLING_RULES = (STRICT, SAVE_VIDEO_FRAMES, GET_INDEX)
"""A benchmark's ``video.sampling`` rule (see the module doc)."""
UNBOUNDED = 100000
"""``MVBench.get_index``'s window for a row without a bound: -100000..100000 seconds."""


def sample_indices(total: int, count: int, source: str, rule: str = STRICT) -> list[int]:
    """Returns ``count`` uniformly spaced frame indices of a ``total``-frame source (``save_video_frames``).

    Raises:
        VideoError: the source has no frames, or (``strict``) fewer than ``count`` (naming ``source``).
    """
    if count < 1:
        raise ValueError(f"frame count {count} must be >= 1")
    if total < 1 or (rule == STRICT and total < count):
        raise VideoError(f"{source}: {total} frames, fewer than the {count} requested")
    step = total / (count + 1)
    return [int(i * step) for i in range(1, count + 1)]


Window = tuple[float, float]
"""A part of a clip, (start, end) in seconds (MVBench's ``start``/``end`` where its ``bound`` is true)."""


def window_frames(total: int, fps: float, window: Window | None) -> tuple[int, int]:
    """Returns (first frame, frame count) of ``window`` in a ``total``-frame source at ``fps``; the whole
    source without a window. The window's frames are ``round(start * fps)`` to ``round(end * fps)``, cut to
    the source (``strict`` and ``save_video_frames`` sample within them)."""
    if window is None:
        return 0, total
    first = max(0, round(window[0] * fps))
    last = min(round(window[1] * fps), total - 1)
    return first, max(0, last - first + 1)


def get_index_frames(
    total: int, fps: float, count: int, window: Window | None, folder: bool
) -> tuple[int, int, list[int]]:
    """Returns (first, last frame of the window, the frames ``MVBench.get_index`` picks), all as 0-based
    positions in the source's frames.

    ``MVBench.read_video`` numbers a file's frames from 0 and bounds them by ``len(vr) - 1``; ``read_frame``
    numbers a folder's files ``00001.jpg``.. from 1 (``first_idx=1``) and bounds them by ``len(listdir)``,
    so its frame ``n`` is the folder's ``n - 1``-th file in name order.
    """
    first_idx, max_frame = (1, total) if folder else (0, total - 1)
    start, end = window if window is not None else (-UNBOUNDED, UNBOUNDED)
    start_idx = max(first_idx, round(start * fps))
    end_idx = min(round(end * fps), max_frame)
    seg_size = float(end_idx - start_idx) / count
    picked = [int(start_idx + (seg_size / 2) + round(seg_size * idx)) - first_idx for idx in range(count)]
    return start_idx - first_idx, end_idx - first_idx, picked


def frame_plan(
    total: int, fps: float, count: int, rule: str, window: Window | None, source: str, folder: bool = False
) -> tuple[int, int, list[int]]:
    """Returns (first frame of the clip the model sees, its frame count, the sampled frames' positions in the
    source) for ``count`` frames of a ``total``-frame source at ``fps`` under ``rule`` (see the module doc).

    The clip is the window (VLMEvalKit's subclip of a bounded row), or the whole source; each sampled frame's
    index in the clip is its source position minus the clip's first. ``folder``: the source is a frame
    folder, which ``get_index`` numbers from 1.

    Raises:
        VideoError: the rule refuses the clip (``strict``: fewer than ``count`` frames; every rule: no frames,
            or a picked frame outside the source, which VLMEvalKit cannot read either), naming ``source``.
    """
    where = source if window is None else f"{source} window {window[0]:g}-{window[1]:g} s"
    if rule not in SAMPLING_RULES:
        raise ValueError(f"video sampling rule {rule!r} is none of {SAMPLING_RULES}")
    if total < 1:
        raise VideoError(f"{where}: no frames")
    if not fps > 0 and (window is not None or rule == GET_INDEX):
        raise VideoError(f"{where}: no frame rate in the stream, so its frames cannot be placed in seconds")
    if rule != GET_INDEX:
        first, length = window_frames(total, fps, window)
        return first, length, [first + i for i in sample_indices(length, count, where, rule)]
    start, end, picked = get_index_frames(total, fps, count, window, folder)
    outside = sorted({i for i in picked if not 0 <= i < total})
    if outside:
        raise VideoError(
            f"{where}: MVBench.get_index picks frames {outside[:3]} of a {total}-frame clip (the window lies "
            "outside the clip, which VLMEvalKit cannot read either)"
        )
    first, last = min(start, *picked), max(end, *picked)
    return first, last - first + 1, picked


def _open_frame(path: Path) -> Image.Image:
    """Returns a frame file decoded in RGB within the media limits, downscaled to ``max_frame_pixels``."""
    try:
        return fit_frame(decode_image(path, f"{path}: frame"))
    except MediaError as error:  # a refused or undecodable frame names the file
        raise VideoError(str(error)) from error


def _frame_files(folder: Path) -> list[Path]:
    """Returns a frame folder's frame files (``FRAME_SUFFIXES``) sorted by name."""
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in FRAME_SUFFIXES)


def read_frame_folder(folder: Path, count: int, fps: float, window: Window | None = None, rule: str = STRICT) -> Video:
    """Returns ``count`` frames sampled by ``rule`` from a folder of pre-extracted frames (sorted by file name).

    ``fps`` is the rate the folder's frames were extracted at (a benchmark column or config value). With a
    ``window`` the frames are sampled within it and the clip starts at its first frame. A frame the rule
    picks twice is decoded once and given twice.

    Raises:
        VideoError: the folder is missing, its rule refuses it (``frame_plan``), or a frame does not decode.
    """
    if not folder.is_dir():
        raise VideoError(f"{folder}: no frame folder there")
    files = _frame_files(folder)
    first, length, indices = frame_plan(len(files), fps, count, rule, window, str(folder), folder=True)
    decoded = {i: _open_frame(files[i]) for i in sorted(set(indices))}
    frames = tuple(decoded[i] for i in indices)
    return Video(frames, tuple(i - first for i in indices), fps, length, str(folder))


def _open_container(path: Path) -> Any:
    """Returns ``path`` opened by PyAV through the demuxers of ``video_formats`` only (FFmpeg's
    ``format_whitelist``, checked after probing and before the demuxer reads anything, so a playlist never opens
    the files it names).

    Raises:
        VideoError: the file is in another container, or does not open.
    """
    import av  # the one module that needs FFmpeg; imported here so frame folders never load it

    formats = media_limits().video_formats
    try:
        return av.open(str(path), container_options={"format_whitelist": ",".join(formats)})
    except Exception as error:  # FFmpeg's errors on a corrupt or unsupported file name the file
        if getattr(error, "errno", None) == errno.EINVAL:
            raise VideoError(
                f"{path}: not a container of video_formats={list(formats)} ({SETTINGS}); FFmpeg refused it "
                f"({type(error).__name__}); convert the clip to mp4, or add its demuxer there"
            ) from error
        raise VideoError(f"{path}: video does not decode ({type(error).__name__}: {error})") from error


def _stream_frames(path: Path) -> tuple[int, float]:
    """Returns (frame count, frame rate) of a video file's first video stream from its header (the count of
    packets where the header has none), decoding nothing.

    Raises:
        VideoError: the file does not open (or not in an allowed container), has no video stream, or its frames
            are larger than ``max_image_pixels``.
    """
    with _open_container(path) as container:
        try:
            if not container.streams.video:
                raise VideoError(f"{path}: no video stream")
            stream = container.streams.video[0]
            width, height = stream.codec_context.width, stream.codec_context.height
            if width * height > media_limits().max_image_pixels:
                raise VideoError(
                    f"{path}: frames are {width}x{height} = {width * height:,} pixels, above max_image_pixels="
                    f"{media_limits().max_image_pixels} ({SETTINGS}); raise it to read such clips"
                )
            rate = float(stream.average_rate or stream.guessed_rate or 0)
            total = stream.frames or sum(1 for packet in container.demux(stream) if packet.size)
        except VideoError:
            raise
        except Exception as error:  # FFmpeg's errors on a corrupt or unsupported file name the file
            raise VideoError(f"{path}: video does not decode ({type(error).__name__}: {error})") from error
    return total, rate


def _frame_image(frame: Any) -> Image.Image:
    """Returns a decoded PyAV frame in RGB, converted straight to ``fitted_size`` (bicubic) when it is above
    ``max_frame_pixels``: the full-resolution RGB frame is never made."""
    width, height = fitted_size((frame.width, frame.height))
    if (width, height) == (frame.width, frame.height):
        return frame.to_image()
    return frame.to_image(width=width, height=height, interpolation="BICUBIC")


def read_video_file(path: Path, count: int, window: Window | None = None, rule: str = STRICT) -> Video:
    """Returns ``count`` frames sampled by ``rule`` from a video file, decoded with PyAV.

    The frame count is the stream header's, or the number of packets when the header has none; decoding
    keeps only the sampled frames (a 10-minute clip is never held in memory whole), a frame picked twice
    once. With a ``window`` the frames are sampled within it and the clip starts at its first frame.

    Raises:
        VideoError: the file is missing, does not decode, is refused by the media limits (``_stream_frames``),
            has no video stream, its rule refuses it (``frame_plan``), or it decodes to fewer frames than its
            count promised.
    """
    if not path.is_file():
        raise VideoError(f"{path}: no video file there")
    total, rate = _stream_frames(path)
    first, length, indices = frame_plan(total, rate, count, rule, window, str(path))
    wanted, decoded = set(indices), {}
    try:
        with _open_container(path) as container:
            for number, frame in enumerate(container.decode(container.streams.video[0])):
                if number in wanted:
                    decoded[number] = _frame_image(frame)
                if len(decoded) == len(wanted):
                    break
    except VideoError:
        raise
    except Exception as error:  # FFmpeg's errors on a corrupt or unsupported file name the file
        raise VideoError(f"{path}: video does not decode ({type(error).__name__}: {error})") from error
    if len(decoded) < len(wanted):
        raise VideoError(f"{path}: decoded {len(decoded)} of the {len(wanted)} sampled frames (truncated file?)")
    frames = tuple(decoded[i] for i in indices)
    return Video(frames, tuple(i - first for i in indices), rate, length, str(path))


def load_video(path: Path, count: int, folder_fps: float, window: Window | None = None, rule: str = STRICT) -> Video:
    """Returns ``count`` frames of ``path`` sampled by ``rule``: a frame folder (at ``folder_fps``) or a file."""
    if path.is_dir():
        return read_frame_folder(path, count, folder_fps, window, rule)
    return read_video_file(path, count, window, rule)


def embedded_video(encoded: tuple[bytes, ...], count: int, fps: float, source: str, rule: str = STRICT) -> Video:
    """Returns ``count`` frames sampled by ``rule`` from a row's embedded frames (the ``frames`` column).

    Raises:
        VideoError: the rule refuses them (``strict``: fewer than ``count``), a frame does not decode, or the
            frames differ in size.
    """
    indices = frame_plan(len(encoded), fps, count, rule, None, source)[2]
    decoded = {}
    for number in sorted(set(indices)):
        try:
            decoded[number] = fit_frame(decode_image(encoded[number], f"{source}: frame {number}"))
        except MediaError as error:  # a refused or corrupt frame names its item and position
            raise VideoError(str(error)) from error
    return Video(tuple(decoded[i] for i in indices), tuple(indices), fps, len(encoded), source)


def row_video(item: Item, bench: VideoSource) -> Video:
    """Returns the clip of a benchmark row, sampled by its benchmark's rule and capped as it says.

    Raises:
        VideoError: the row has no clip, no valid ``fps`` for embedded frames, or its clip fails to load
            (see ``embedded_video``, ``read_frame_folder``, ``read_video_file``); the message names the file.
    """
    source = f"{bench.file} row {item.index}"
    if item.frames:
        try:
            fps = float(item.extra[FPS_COLUMN])
        except (KeyError, ValueError) as error:
            raise VideoError(f"{source}: embedded frames need a numeric {FPS_COLUMN!r} column") from error
        clip = embedded_video(item.frames, bench.frames, fps, source, bench.sampling)
    elif item.video:
        path, window = clip_path(item, bench), clip_window(item, bench)
        clip = load_video(path, bench.frames, bench.folder_fps, window, bench.sampling)
    else:
        raise VideoError(f"{source}: a video benchmark row needs a 'frames' or 'video' cell")
    return replace(clip, max_tokens=bench.max_tokens)


def clip_frames(path: Path, folder_fps: float = 1.0) -> tuple[int, float]:
    """Returns (frame count, frame rate) of a frame folder (its frames at ``folder_fps``) or a video file,
    decoding no frame; (0, ``folder_fps``) where nothing is there.

    Raises:
        VideoError: the video file cannot be opened or has no video stream.
    """
    if path.is_dir():
        return len(_frame_files(path)), folder_fps
    if not path.is_file():
        return 0, folder_fps
    return _stream_frames(path)


def _cell(item: Item, column: str, bench: VideoSource) -> str:
    """Returns a row's cell of ``column`` ("" for pandas' ``nan``), raising ``VideoError`` when the file lacks it."""
    if column not in item.extra:
        raise VideoError(
            f"{bench.file} row {item.index}: no {column!r} column, which bench.*.video names; fix the file or "
            "the config's video block"
        )
    value = item.extra[column].strip()
    return "" if value == "nan" else value


def clip_path(item: Item, bench: VideoSource) -> Path:
    """Returns where a row's clip is: ``root / <prefix cell> / (<video cell> + suffix)``, the suffix being the
    row's ``suffix_column`` cell where one is named, else ``bench.suffix`` (VLMEvalKit's ``osp.join(
    data_root, line['prefix'], line['video'] + line['suffix'])``).

    The cells come from the file, so the joined path must stay inside ``root`` as written (``..`` and absolute
    cells are resolved lexically; a symlink the user placed under ``root`` is theirs to follow).

    Raises:
        VideoError: a named prefix or suffix column is missing from the file, or the path leaves ``root``.
    """
    prefix = _cell(item, bench.prefix_column, bench) if bench.prefix_column else ""
    suffix = _cell(item, bench.suffix_column, bench) if bench.suffix_column else bench.suffix
    path = bench.root / prefix / f"{item.video}{suffix}"
    root = os.path.abspath(bench.root)
    if os.path.commonpath([root, os.path.abspath(path)]) != root:
        raise VideoError(
            f"{bench.file} row {item.index}: clip {str(path)!r} lies outside the benchmark's video root {root} "
            "(bench.*.video.root); a row may name only clips under it: fix the row's video/prefix cells"
        )
    return path


TRUE_CELLS = ("true", "1", "yes")
"""A ``bound_column`` cell that asks for the window (pandas writes Python's ``True`` as ``True``)."""


def clip_window(item: Item, bench: VideoSource) -> Window | None:
    """Returns the row's window (start, end) in seconds where its ``bound_column`` cell is true, else None.

    Raises:
        VideoError: a named column is missing, or a bounded row's start/end is not a number or ends before it
            starts (naming the row and the cells).
    """
    if not bench.bound_column or _cell(item, bench.bound_column, bench).lower() not in TRUE_CELLS:
        return None
    start, end = _cell(item, bench.start_column, bench), _cell(item, bench.end_column, bench)
    try:
        window = (float(start), float(end))
    except ValueError as error:
        raise VideoError(
            f"{bench.file} row {item.index}: {bench.bound_column}=True but {bench.start_column}={start!r}, "
            f"{bench.end_column}={end!r} are not seconds"
        ) from error
    if not window[1] > window[0] >= 0:
        raise VideoError(f"{bench.file} row {item.index}: window {window} does not run forward from >= 0 s")
    return window


def clip_problem(item: Item, bench: VideoSource) -> str:
    """Returns why a row's clip cannot give ``bench.frames`` frames under ``bench.sampling`` ("" when it can),
    without decoding frames.

    The benchmark reader turns a reason into a counted ``Skip``: a missing or unreadable file, no clip cell,
    a clip outside ``root`` or in a container outside ``video_formats``, frames (a folder's sampled frame files:
    their headers) refused by the media limits, sampled frames beyond ``decode_budget_mib``, or a clip its rule
    refuses (``frame_plan``). A frame that fails to decode later raises ``VideoError`` naming it.
    """
    try:
        check_decoded_bytes(3 * bench.frames * media_limits().max_frame_pixels, f"{bench.file} row {item.index}")
        if item.frames:
            frame_plan(len(item.frames), 1.0, bench.frames, bench.sampling, None, "embedded frames")
        elif item.video:
            path, window = clip_path(item, bench), clip_window(item, bench)
            if not path.exists():
                return f"{path}: no video file or frame folder there"
            total, fps = clip_frames(path, bench.folder_fps)
            picked = frame_plan(total, fps, bench.frames, bench.sampling, window, str(path), folder=path.is_dir())[2]
            if path.is_dir():
                _check_frame_headers(_frame_files(path), picked)
        else:
            return "a video benchmark row needs a 'frames' or 'video' cell"
    except MediaError as error:
        return str(error)
    return ""


def _check_frame_headers(files: list[Path], picked: list[int]) -> None:
    """Returns None when every picked frame file opens within the media limits (its header read, nothing decoded).

    Raises:
        MediaError: a frame file's format or size is refused, naming the file.
    """
    for index in sorted(set(picked)):
        open_image(files[index], f"{files[index]}: frame").close()


@dataclass(frozen=True)
class VideoSource:
    """Where a video benchmark's clips are and how they are sampled (``bench.<name>.video`` resolved).

    Attributes:
        file: the benchmark file (named in errors about embedded frames).
        root: folder the ``video`` cells are relative to.
        suffix: appended to a ``video`` cell to name its file ("" for frame folders).
        frames: frames sampled per clip.
        max_tokens: cap on a clip's post-merger tokens.
        folder_fps: rate of pre-extracted frame folders.
        prefix_column: column whose cell is a folder between ``root`` and the ``video`` cell ("" = none).
        suffix_column: column whose cell is appended to the ``video`` cell instead of ``suffix`` ("" = none).
        bound_column: column whose true cell asks for the window ``start_column``..``end_column`` (seconds)
            of the clip ("" = whole clips).
        start_column: the window's start (seconds).
        end_column: the window's end (seconds).
        sampling: which frames are taken (``SAMPLING_RULES``; the module doc).
    """

    file: Path
    root: Path
    suffix: str
    frames: int
    max_tokens: int
    folder_fps: float
    prefix_column: str = ""
    suffix_column: str = ""
    bound_column: str = ""
    start_column: str = ""
    end_column: str = ""
    sampling: str = STRICT
