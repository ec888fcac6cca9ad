"""Videos as uniformly sampled frames: from a folder of pre-extracted frames or a video file (PyAV).

A ``Video`` is what the processor needs from a clip: its sampled frames (RGB, one size), where each frame
sits in the source (frame index) and the source's frame rate, from which the Qwen-VL families derive their
temporal positions (Qwen2.5-VL's seconds per temporal patch) and prompt timestamps (Qwen3-VL). Sampling is
VLMEvalKit's ``VideoBaseDataset`` rule: ``count`` frames at ``int(i * total / (count + 1))``,
i = 1..count, so the first and last frames are never taken and the result is a pure function of
(total, count).

Decoding video files uses PyAV (``av`` on PyPI: manylinux wheels with FFmpeg inside, CPU only, no
torchvision), which the project depends on for this reason. Any failure (a file that does not decode, fewer
frames than asked for, frames of different sizes) raises ``VideoError`` naming the file, which the benchmark
reader turns into a counted ``Skip``.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, replace
from pathlib import Path

from PIL import Image

from sparsectx.data.tsv import FPS_COLUMN, Item

FRAME_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
"""Files a frame folder's frames may have; other files in the folder are ignored."""


class VideoError(ValueError):
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
            raise VideoError(
                f"{self.source}: {len(self.frames)} frames for {len(self.frame_indices)} frame indices"
            )
        if not self.fps > 0:
            raise VideoError(f"{self.source}: fps={self.fps} must be > 0")
        sizes = {frame.size for frame in self.frames}
        if len(sizes) > 1:
            raise VideoError(
                f"{self.source}: frames differ in size {sorted(sizes)}; a video has one frame size"
            )

    @property
    def sampled_fps(self) -> float:
        """Returns the rate of the sampled frames: sampled count over the source's duration in seconds."""
        return len(self.frames) / (self.total_frames / self.fps)

    def timestamps(self) -> list[float]:
        """Returns each sampled frame's time in seconds in the source (frame index / fps)."""
        return [index / self.fps for index in self.frame_indices]


def sample_indices(total: int, count: int, source: str) -> list[int]:
    """Returns ``count`` uniformly spaced frame indices of a ``total``-frame source (VLMEvalKit's rule).

    Raises:
        VideoError: the source has fewer than ``count`` frames (naming ``source``); a benchmark asking for
            32 frames is never silently scored on fewer.
    """
    if count < 1:
        raise ValueError(f"frame count {count} must be >= 1")
    if total < count:
        raise VideoError(f"{source}: {total} frames, fewer than the {count} requested")
    step = total / (count + 1)
    return [int(i * step) for i in range(1, count + 1)]


def _open_frame(path: Path) -> Image.Image:
    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except Exception as error:  # any decoder failure on a user's file names the file
        raise VideoError(f"{path}: frame does not decode ({type(error).__name__}: {error})") from error


def read_frame_folder(folder: Path, count: int, fps: float) -> Video:
    """Returns ``count`` frames sampled from a folder of pre-extracted frames (sorted by file name).

    ``fps`` is the rate the folder's frames were extracted at (a benchmark column or config value).

    Raises:
        VideoError: the folder is missing, holds fewer than ``count`` frames, or a frame does not decode.
    """
    if not folder.is_dir():
        raise VideoError(f"{folder}: no frame folder there")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in FRAME_SUFFIXES)
    indices = sample_indices(len(files), count, str(folder))
    frames = tuple(_open_frame(files[i]) for i in indices)
    return Video(frames, tuple(indices), fps, len(files), str(folder))


def read_video_file(path: Path, count: int) -> Video:
    """Returns ``count`` frames sampled from a video file, decoded with PyAV.

    The frame count is the stream header's, or the number of packets when the header has none; decoding
    keeps only the sampled frames (a 10-minute clip is never held in memory whole).

    Raises:
        VideoError: the file is missing, does not decode, has no video stream, has fewer than ``count``
            frames, or decodes to fewer frames than its count promised.
    """
    import av  # the one module that needs FFmpeg; imported here so frame folders never load it

    if not path.is_file():
        raise VideoError(f"{path}: no video file there")
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoError(f"{path}: no video stream")
            stream = container.streams.video[0]
            rate = float(stream.average_rate or stream.guessed_rate or 0)
            total = stream.frames or sum(1 for packet in container.demux(stream) if packet.size)
            indices = sample_indices(total, count, str(path))
            container.seek(0)
            wanted, frames = set(indices), []
            for number, frame in enumerate(container.decode(stream)):
                if number in wanted:
                    frames.append(frame.to_image().convert("RGB"))
                if len(frames) == len(indices):
                    break
    except VideoError:
        raise
    except Exception as error:  # FFmpeg's errors on a corrupt or unsupported file name the file
        raise VideoError(f"{path}: video does not decode ({type(error).__name__}: {error})") from error
    if len(frames) < len(indices):
        raise VideoError(f"{path}: decoded {len(frames)} of the {count} sampled frames (truncated file?)")
    return Video(tuple(frames), tuple(indices), rate, total, str(path))


def load_video(path: Path, count: int, folder_fps: float) -> Video:
    """Returns ``count`` sampled frames of ``path``: a frame folder (at ``folder_fps``) or a video file."""
    return read_frame_folder(path, count, folder_fps) if path.is_dir() else read_video_file(path, count)


def embedded_video(encoded: tuple[bytes, ...], count: int, fps: float, source: str) -> Video:
    """Returns ``count`` frames sampled from a row's embedded frames (the ``frames`` column).

    Raises:
        VideoError: fewer than ``count`` frames, a frame does not decode, or the frames differ in size.
    """
    indices = sample_indices(len(encoded), count, source)
    frames = []
    for number in indices:
        try:
            with Image.open(io.BytesIO(encoded[number])) as image:
                frames.append(image.convert("RGB"))
        except Exception as error:  # a corrupt frame names its item and position
            raise VideoError(f"{source}: frame {number} does not decode ({error})") from error
    return Video(tuple(frames), tuple(indices), fps, len(encoded), source)


def row_video(item: Item, bench: VideoSource) -> Video:
    """Returns the clip of a benchmark row, sampled and capped as its benchmark says.

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
        clip = embedded_video(item.frames, bench.frames, fps, source)
    elif item.video:
        clip = load_video(bench.root / f"{item.video}{bench.suffix}", bench.frames, bench.folder_fps)
    else:
        raise VideoError(f"{source}: a video benchmark row needs a 'frames' or 'video' cell")
    return replace(clip, max_tokens=bench.max_tokens)


def frame_count(path: Path) -> int:
    """Returns the number of frames of a frame folder or video file without decoding any (0 if absent).

    Raises:
        VideoError: the video file cannot be opened or has no video stream.
    """
    if path.is_dir():
        return sum(1 for p in path.iterdir() if p.suffix.lower() in FRAME_SUFFIXES)
    if not path.is_file():
        return 0
    import av

    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoError(f"{path}: no video stream")
            stream = container.streams.video[0]
            return stream.frames or sum(1 for packet in container.demux(stream) if packet.size)
    except VideoError:
        raise
    except Exception as error:  # FFmpeg's errors on a corrupt or unsupported file name the file
        raise VideoError(f"{path}: video does not decode ({type(error).__name__}: {error})") from error


def clip_problem(item: Item, bench: VideoSource) -> str:
    """Returns why a row's clip cannot give ``bench.frames`` frames ("" when it can), without decoding frames.

    The benchmark reader turns a reason into a counted ``Skip``: a missing or unreadable file, no clip cell,
    or fewer frames than requested. A frame that fails to decode later raises ``VideoError`` naming it.
    """
    if item.frames:
        have, where = len(item.frames), "embedded frames"
    elif item.video:
        path = bench.root / f"{item.video}{bench.suffix}"
        try:
            have, where = frame_count(path), str(path)
        except VideoError as error:
            return str(error)
        if have == 0:
            return f"{path}: no video file or frame folder there"
    else:
        return "a video benchmark row needs a 'frames' or 'video' cell"
    return f"{where}: {have} frames, fewer than the {bench.frames} requested" if have < bench.frames else ""


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
    """

    file: Path
    root: Path
    suffix: str
    frames: int
    max_tokens: int
    folder_fps: float
