"""Video decoding (frame folders, PyAV files), the synthetic video family, and its TSV round trip.

Bad input never passes silently: an undecodable video or frame, fewer frames than requested and frames of
different sizes raise ``VideoError`` naming the file; a bad ``frames`` cell is a counted ``Skip``.
"""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import av
import numpy as np
import pytest
from omegaconf import OmegaConf
from PIL import Image

from sparsectx.data import load_suite_config, read_tsv, write_tsv
from sparsectx.data.video import (
    VideoError,
    VideoSource,
    clip_problem,
    embedded_video,
    read_frame_folder,
    read_video_file,
    row_video,
    sample_indices,
)
from sparsectx.data.video_family import KINDS, build_video_bench, load_video_family_config, video_items

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.fixture(scope="module")
def suite():  # noqa: ANN201
    return load_suite_config(OmegaConf.load(CONF / "data" / "tiny.yaml"))


@pytest.fixture(scope="module")
def family():  # noqa: ANN201
    return replace(load_video_family_config(OmegaConf.load(CONF / "data" / "video" / "tiny_video.yaml")), size=12)


def _frame(value: int, size: tuple[int, int] = (32, 24)) -> Image.Image:
    return Image.fromarray(np.full((size[1], size[0], 3), value, dtype=np.uint8))


def _write_mp4(path: Path, count: int, fps: int) -> None:
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for i in range(count):
            frame = av.VideoFrame.from_ndarray(np.full((32, 32, 3), 8 * i, dtype=np.uint8), format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())


def test_sampling_is_vlmevalkit_uniform_and_refuses_short_sources() -> None:
    assert sample_indices(10, 4, "x") == [2, 4, 6, 8]
    assert sample_indices(8, 8, "x") == list(range(8))
    with pytest.raises(VideoError, match=r"clip\.mp4: 3 frames, fewer than the 4 requested"):
        sample_indices(3, 4, "clip.mp4")


def test_frame_folder_samples_in_name_order_and_names_bad_files(tmp_path: Path) -> None:
    folder = tmp_path / "clip"
    folder.mkdir()
    for i in range(10):
        _frame(10 * i).save(folder / f"{i:04d}.png")
    (folder / "notes.txt").write_text("ignored")
    video = read_frame_folder(folder, 4, fps=5.0)
    assert video.frame_indices == (2, 4, 6, 8)
    assert [f.getpixel((0, 0))[0] for f in video.frames] == [20, 40, 60, 80]
    assert video.sampled_fps == pytest.approx(2.0) and video.timestamps() == [0.4, 0.8, 1.2, 1.6]
    with pytest.raises(VideoError, match="fewer than the 32 requested"):
        read_frame_folder(folder, 32, fps=5.0)
    (folder / "0004.png").write_bytes(b"not a png")
    with pytest.raises(VideoError, match=r"0004\.png: frame does not decode"):
        read_frame_folder(folder, 4, fps=5.0)
    with pytest.raises(VideoError, match="no frame folder"):
        read_frame_folder(tmp_path / "missing", 4, fps=5.0)


def test_video_file_decodes_with_pyav_and_bad_files_name_themselves(tmp_path: Path) -> None:
    clip = tmp_path / "clip.mp4"
    _write_mp4(clip, 12, fps=4)
    video = read_video_file(clip, 3)
    assert video.frame_indices == (3, 6, 9) and video.fps == 4.0 and video.total_frames == 12
    assert all(f.size == (32, 32) for f in video.frames)
    with pytest.raises(VideoError, match=r"clip\.mp4: 12 frames, fewer than the 32 requested"):
        read_video_file(clip, 32)
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"garbage" * 50)
    with pytest.raises(VideoError, match=r"broken\.mp4: video does not decode"):
        read_video_file(broken, 3)
    with pytest.raises(VideoError, match="no video file"):
        read_video_file(tmp_path / "absent.mp4", 3)


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def test_frames_of_different_sizes_or_undecodable_are_refused() -> None:
    with pytest.raises(VideoError, match="row 3: frames differ in size"):
        embedded_video((_png(_frame(0, (32, 24))), _png(_frame(0, (24, 32)))), 2, 2.0, "row 3")
    with pytest.raises(VideoError, match="row 4: frame 1 does not decode"):
        embedded_video((_png(_frame(0)), b"junk"), 2, 2.0, "row 4")


def test_family_is_deterministic_balanced_and_answerable_from_its_frames(suite, family, tmp_path: Path) -> None:  # noqa: ANN001
    first, second = video_items(suite, family), video_items(suite, family)
    assert first == second
    assert [item.category for item in first] == [KINDS[n % 3] for n in range(12)]
    assert sorted(item.answer for item in first) == sorted("ABCD" * 3)
    for item in first:
        assert len(item.frames) == family.frames and item.options[item.answer].lower() in item.trace.lower()
        frames = [np.asarray(Image.open(io.BytesIO(f))) for f in item.frames]
        changed = [int((a != b).any()) for a, b in zip(frames, frames[1:], strict=False)]
        assert sum(changed) > 0  # no item is answerable from one frame: something changes over time
        if item.category == "blink":
            count = int(item.options[item.answer])
            assert changed.count(1) == 2 * count  # each one-frame blink is one change off and one back on
    out = build_video_bench(replace(suite, out_dir=str(tmp_path)), family)
    again = build_video_bench(replace(suite, out_dir=str(tmp_path / "again")), family)
    assert out.read_bytes() == again.read_bytes()
    back, skips = read_tsv(out)
    assert skips == [] and back == first


def test_a_bad_frames_cell_is_a_counted_skip(suite, family, tmp_path: Path) -> None:  # noqa: ANN001
    items = video_items(suite, replace(family, size=3))
    items[1] = replace(items[1], frames=(items[1].frames[0], b"junk"))
    write_tsv(tmp_path / "v.tsv", items)
    back, skips = read_tsv(tmp_path / "v.tsv")
    assert [item.index for item in back] == [0, 2]
    assert len(skips) == 1 and skips[0].index == "1" and "frame 1: image does not decode" in skips[0].reason


def test_clip_problems_are_found_before_decoding(suite, family, tmp_path: Path) -> None:  # noqa: ANN001
    folder = tmp_path / "clips" / "short"
    folder.mkdir(parents=True)
    for i in range(3):
        _frame(i).save(folder / f"{i}.png")
    _write_mp4(tmp_path / "clips" / "long.mp4", 12, fps=4)
    source = VideoSource(tmp_path / "b.tsv", tmp_path / "clips", "", 8, 256, 1.0)
    row = replace(video_items(suite, replace(family, size=1))[0], frames=(), video="short")
    assert clip_problem(row, source) == f"{folder}: 3 frames, fewer than the 8 requested"
    assert clip_problem(replace(row, video="absent"), source).endswith("absent: no video file or frame folder there")
    assert clip_problem(replace(row, video="long.mp4"), source) == ""
    assert row_video(replace(row, video="long.mp4"), source).frame_indices == (1, 2, 4, 5, 6, 8, 9, 10)
    assert clip_problem(replace(row, video=""), source) == "a video benchmark row needs a 'frames' or 'video' cell"
    embedded = video_items(suite, replace(family, size=1))[0]
    with pytest.raises(VideoError, match="b.tsv row 0: embedded frames need a numeric 'fps' column"):
        row_video(replace(embedded, extra={}), source)


def test_prefix_and_suffix_columns_name_the_clip_as_vlmevalkit_joins_them(
    suite,  # noqa: ANN001
    family,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    """``osp.join(data_root, line['prefix'], line['video'] + line['suffix'])`` (MVBench, MLVU, TempCompass)."""
    (tmp_path / "video" / "clevrer").mkdir(parents=True)
    _write_mp4(tmp_path / "video" / "clevrer" / "v1.mp4", 12, fps=4)
    base = replace(video_items(suite, replace(family, size=1))[0], frames=())
    source = VideoSource(tmp_path / "b.tsv", tmp_path, "", 8, 256, 1.0, prefix_column="prefix")
    row = replace(base, video="v1.mp4", extra={"prefix": "./video/clevrer/"})
    assert clip_problem(row, source) == ""
    assert row_video(row, source).source == str(tmp_path / "video" / "clevrer" / "v1.mp4")
    lost = replace(row, extra={"prefix": "./video/other"})
    assert (
        clip_problem(lost, source) == f"{tmp_path / 'video' / 'other' / 'v1.mp4'}: no video file or frame folder there"
    )
    with_suffix = replace(source, suffix_column="suffix")
    assert (
        clip_problem(replace(row, video="v1", extra={"prefix": "video/clevrer", "suffix": ".mp4"}), with_suffix) == ""
    )
    assert "no 'suffix' column" in clip_problem(replace(row, video="v1"), with_suffix)
    assert "no 'prefix' column" in clip_problem(replace(row, extra={}), source)


def test_a_bounded_row_is_sampled_within_its_window_and_counted_there(
    suite,  # noqa: ANN001
    family,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    """MVBench's ``bound``/``start``/``end``: frames round(start*fps)..round(end*fps) of the clip, the clip
    starting at the window (the subclip VLMEvalKit cuts); too few frames there is a named problem."""
    _write_mp4(tmp_path / "c.mp4", 30, fps=3)  # 10 s
    folder = tmp_path / "frames"
    folder.mkdir()
    for i in range(30):  # 10 s at 3 fps
        _frame(i).save(folder / f"{i + 1:05d}.jpg")
    source = VideoSource(
        tmp_path / "b.tsv", tmp_path, "", 8, 256, 3.0, bound_column="bound", start_column="start", end_column="end"
    )
    base = replace(video_items(suite, replace(family, size=1))[0], frames=())
    row = replace(base, video="c.mp4", extra={"bound": "True", "start": "2.0", "end": "6.0"})
    clip = row_video(row, source)  # frames 6..18 of 30: 13 frames, 8 sampled from them
    assert clip.total_frames == 13 and clip.frame_indices == (1, 2, 4, 5, 7, 8, 10, 11)
    assert clip.frames[0].getpixel((0, 0))[0] == pytest.approx(8 * 7, abs=6)  # source frame 7 = window frame 1
    assert row_video(replace(row, extra={"bound": "False", "start": "", "end": ""}), source).total_frames == 30
    assert clip_problem(replace(row, extra={"bound": "True", "start": "2", "end": "3"}), source) == (
        f"{tmp_path / 'c.mp4'} window 2-3 s: 4 frames, fewer than the 8 requested"
    )
    framed = replace(row, video="frames", extra={"bound": "True", "start": "1", "end": "5"})
    assert clip_problem(framed, source) == ""  # frames 3..15 at 3 fps: 13 frames
    assert row_video(framed, source).total_frames == 13
    bad = replace(row, extra={"bound": "True", "start": "nan", "end": "6"})
    assert "bound=True but start='', end='6' are not seconds" in clip_problem(bad, source)
    backwards = replace(row, extra={"bound": "True", "start": "6", "end": "2"})
    assert "does not run forward" in clip_problem(backwards, source)


def test_a_window_needs_all_three_columns() -> None:
    from sparsectx.eval.config import VideoSpec

    with pytest.raises(ValueError, match="name all three"):
        VideoSpec(32, 12288, "video", "", "", 1.0, "get_index", bound_column="bound", start_column="start")
    spec = VideoSpec(32, 12288, "video", "", "", 1.0, "get_index", "prefix", "", "bound", "start", "end")
    assert spec.end_column == "end"
