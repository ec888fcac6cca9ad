"""Each benchmark's frame sampling rule picks the frames VLMEvalKit's own video class picks, short clips included.

VLMEvalKit never skips a short clip: ``VideoBaseDataset.save_video_frames`` (and its copies in ``VideoMME``,
``MLVU_MCQ``, ``TempCompass_MCQ``) takes ``int(i * len / (nframe + 1))`` and ``MVBench.get_index`` segment
midpoints of the row's window, both repeating frames of a clip shorter than ``nframe``. The comparison runs the
VLMEvalKit methods themselves in their environment (``real_layouts/vlmeval_frame_indices.py``; skipped, naming
``make vlmeval-env``, where it is absent) over many (frame count, frame rate, window) cases, many shorter than
32 frames, and needs the project's ``frame_plan`` to pick the same frames in the same order, and to refuse
exactly the clips VLMEvalKit cannot read. The rest needs no VLMEvalKit: the configs name the rules, a short
clip is decoded with its repeats, and repeated frames are ordinary frames to the temporal patches and the cap.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from sparsectx.data.tsv import Item
from sparsectx.data.video import (
    GET_INDEX,
    SAVE_VIDEO_FRAMES,
    STRICT,
    Video,
    VideoError,
    VideoSource,
    clip_problem,
    frame_plan,
    row_video,
)
from sparsectx.eval.config import VideoSpec, compose_bench
from sparsectx.models.published import published_folder
from sparsectx.models.video_input import group_timestamps, video_patches

from .vlmeval_cases import require_vlmeval_env, vlmeval_env

SCRIPT = Path(__file__).resolve().parent / "real_layouts" / "vlmeval_frame_indices.py"
PUBLISHED = published_folder("Qwen2.5-VL-7B-Instruct")
RULES = {
    "mvbench": GET_INDEX,
    "mlvu": SAVE_VIDEO_FRAMES,
    "videomme": SAVE_VIDEO_FRAMES,
    "tempcompass_mcq": SAVE_VIDEO_FRAMES,
    "video_tt": SAVE_VIDEO_FRAMES,
    "tiny_video": STRICT,
}
"""Benchmark -> the rule its VLMEvalKit class samples by (Video-TT: upstream ``VideoTT.save_video_frames``,
``VideoBaseDataset``'s lines verbatim; tiny_video: the project's own file)."""
SAVE_VIDEO_FRAMES_CLASSES = ("VideoMME", "MLVU_MCQ", "TempCompass_MCQ", "VideoBaseDataset")
UNIFORM_TOTALS = (1, 2, 3, 5, 7, 10, 16, 20, 31, 32, 33, 47, 63, 64, 65, 100, 301, 1000, 1799, 9001)
VIDEO_TOTALS = (1, 2, 3, 5, 10, 17, 20, 31, 32, 33, 40, 64, 80, 150, 301, 1000, 4501)
VIDEO_FPS = (3.0, 8.0, 12.0, 24.0, 25.0, 29.97, 30.0)
WINDOWS = (None, (0.0, 1.0), (1.0, 6.2), (2.0, 3.0), (0.5, 1.7), (3.3, 3.4), (0.0, 4.0), (5.0, 9.0), (10.0, 20.0))
FRAME_TOTALS = (1, 5, 10, 24, 31, 32, 50, 100, 200)
FRAME_WINDOWS = (None, (0.0, 1.0), (2.0, 15.5), (2.0, 5.5), (0.3, 2.1), (1.0, 1.2), (10.0, 20.0), (40.0, 50.0))
READ_FRAME_FPS = 3.0
"""``MVBench.read_frame``'s own default fps (TVQA frames at 3 fps), which ``save_video_into_images`` keeps."""


def _case(method: str, total: int, fps: float, nframe: int, bound: tuple[float, float] | None) -> dict:
    return {
        "key": f"{method}|{total}|{fps}|{nframe}|{bound}",
        "method": method,
        "total": total,
        "fps": fps,
        "nframe": nframe,
        "bound": list(bound) if bound is not None else None,
    }


def _cases() -> list[dict]:
    cases = [
        _case(f"{cls}.save_video_frames", total, 25.0, nframe, None)
        for cls in SAVE_VIDEO_FRAMES_CLASSES
        for total in UNIFORM_TOTALS
        for nframe in (32, 8, 1)
    ]
    cases += [
        _case("MVBench.read_video", total, fps, nframe, bound)
        for total in VIDEO_TOTALS
        for fps in VIDEO_FPS
        for bound in WINDOWS
        for nframe in ((32, 8) if fps in (8.0, 29.97) else (32,))
    ]
    cases += [
        _case("MVBench.read_frame", total, READ_FRAME_FPS, 32, bound)
        for total in FRAME_TOTALS
        for bound in FRAME_WINDOWS
    ]
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def vlmeval(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Returns VLMEvalKit's frame indices (or its error) per case, run once in its environment."""
    env = require_vlmeval_env()
    work = tmp_path_factory.mktemp("vlmeval_frames")
    (work / "cases.json").write_text(json.dumps(CASES))
    command = [str(vlmeval_env() / "bin" / "python"), str(SCRIPT), "--cases", str(work / "cases.json")]
    command += ["--work-dir", str(work / "lmu"), "--out", str(work / "out.json")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False, cwd=env)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stderr[-3000:]}"
    out = json.loads((work / "out.json").read_text())
    assert sorted(out) == sorted(case["key"] for case in CASES)
    return out


def _ours(case: dict) -> list[int] | str:
    """Returns the project's frames for a case in VLMEvalKit's numbering, or the refusal's message."""
    method, bound = case["method"], tuple(case["bound"]) if case["bound"] is not None else None
    rule = SAVE_VIDEO_FRAMES if method.endswith("save_video_frames") else GET_INDEX
    folder = method == "MVBench.read_frame"
    try:
        picked = frame_plan(case["total"], case["fps"], case["nframe"], rule, bound, "clip", folder=folder)[2]
    except VideoError as error:
        return str(error)
    return [i + 1 for i in picked] if folder else picked  # read_frame opens 00001.jpg as frame 1


def _compare(vlmeval: dict, cases: list[dict]) -> tuple[int, int]:
    """Asserts every case agrees; returns (cases where VLMEvalKit repeats frames, cases it cannot read)."""
    repeats = refused = 0
    for case in cases:
        theirs, ours = vlmeval[case["key"]], _ours(case)
        if "error" in theirs:
            assert isinstance(ours, str), f"{case['key']}: VLMEvalKit fails ({theirs['error']}), we pick {ours}"
            refused += 1
            continue
        assert ours == theirs["indices"], f"{case['key']}: VLMEvalKit reads {theirs['indices']}"
        repeats += len(set(ours)) < len(ours)
    return repeats, refused


@pytest.mark.parametrize("cls", SAVE_VIDEO_FRAMES_CLASSES)
def test_save_video_frames_is_each_classs_own(cls: str, vlmeval: dict) -> None:
    cases = [case for case in CASES if case["method"] == f"{cls}.save_video_frames"]
    repeats, refused = _compare(vlmeval, cases)
    assert repeats >= 10 and refused == 0  # short clips are sampled with repeats, never refused


def test_get_index_is_mvbench_read_video(vlmeval: dict) -> None:
    cases = [case for case in CASES if case["method"] == "MVBench.read_video"]
    repeats, refused = _compare(vlmeval, cases)
    assert repeats >= 100 and refused >= 10  # short windows repeat; windows past the clip fail in VLMEvalKit too


def test_get_index_is_mvbench_read_frame(vlmeval: dict) -> None:
    cases = [case for case in CASES if case["method"] == "MVBench.read_frame"]
    repeats, refused = _compare(vlmeval, cases)
    assert repeats >= 10 and refused >= 1


def test_strict_is_save_video_frames_or_refuses(vlmeval: dict) -> None:
    """The synthetic files' rule: VLMEvalKit's frames where the clip has enough, a counted skip where not."""
    for case in CASES:
        if case["method"] != "VideoBaseDataset.save_video_frames":
            continue
        total, nframe = case["total"], case["nframe"]
        if total >= nframe:
            assert frame_plan(total, 25.0, nframe, STRICT, None, "c")[2] == vlmeval[case["key"]]["indices"]
        else:
            with pytest.raises(VideoError, match=f"c: {total} frames, fewer than the {nframe} requested"):
                frame_plan(total, 25.0, nframe, STRICT, None, "c")


def test_each_benchmark_names_its_vlmevalkit_rule() -> None:
    assert {name: compose_bench(name).video.sampling for name in RULES} == RULES
    with pytest.raises(ValueError, match="bench.\\*.video.sampling"):
        VideoSpec(32, 12288, "video", "", "", 1.0, "linspace")
    with pytest.raises(ValueError, match="ignores windows in VLMEvalKit"):
        VideoSpec(32, 12288, "video", "", "", 1.0, SAVE_VIDEO_FRAMES, "", "", "bound", "start", "end")


def _write_mp4(path: Path, count: int, fps: int) -> None:
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for i in range(count):
            frame = av.VideoFrame.from_ndarray(np.full((32, 32, 3), 20 * i, dtype=np.uint8), format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())


def _row(video: str, extra: dict[str, str]) -> Item:
    return Item(7, b"", "q", {"A": "a", "B": "b"}, "A", "", "", "", "", "", extra, video=video)


def test_a_short_clip_is_sampled_with_repeats_not_skipped(tmp_path: Path) -> None:
    """A 10-frame clip asked for 32 frames: ``save_video_frames`` gives 32 frames, each its source frame."""
    _write_mp4(tmp_path / "short.mp4", 10, fps=8)
    source = VideoSource(tmp_path / "b.tsv", tmp_path, "", 32, 12288, 1.0, sampling=SAVE_VIDEO_FRAMES)
    row = _row("short.mp4", {})
    assert clip_problem(row, source) == ""
    clip = row_video(row, source)
    expected = [int(i * 10 / 33) for i in range(1, 33)]
    assert list(clip.frame_indices) == expected and clip.total_frames == 10 and len(clip.frames) == 32
    assert [f.getpixel((16, 16))[0] for f in clip.frames] == pytest.approx([20 * i for i in expected], abs=6)
    strict = replace(source, sampling=STRICT)
    assert clip_problem(row, strict) == f"{tmp_path / 'short.mp4'}: 10 frames, fewer than the 32 requested"
    with pytest.raises(VideoError, match="fewer than the 32 requested"):
        row_video(row, strict)


def test_a_short_mvbench_window_is_get_index_of_its_frames(tmp_path: Path) -> None:
    """A TVQA frame folder (files 00001.jpg.., 3 fps), window 2.0-5.5 s: frames 6..16, 11 of them for 32."""
    folder = tmp_path / "tvqa" / "clip"
    folder.mkdir(parents=True)
    for number in range(1, 31):
        Image.new("RGB", (16, 16), (8 * number,) * 3).save(folder / f"{number:05d}.png")
    source = VideoSource(
        tmp_path / "b.tsv", tmp_path, "", 32, 12288, 3.0, "prefix", "", "bound", "start", "end", GET_INDEX
    )
    row = _row("clip", {"prefix": "tvqa", "bound": "True", "start": "2.0", "end": "5.5"})
    assert clip_problem(row, source) == ""
    clip = row_video(row, source)
    numbers = [int(6 + 10 / 64 + round(10 / 32 * k)) for k in range(32)]  # get_index's midpoints, from 1
    assert [f.getpixel((8, 8))[0] for f in clip.frames] == [8 * n for n in numbers]
    assert clip.total_frames == 11 and list(clip.frame_indices) == [n - 6 for n in numbers]
    assert len(set(numbers)) == 11  # every frame of the window, some twice
    outside = replace(row, extra={"prefix": "tvqa", "bound": "True", "start": "20.0", "end": "25.0"})
    assert "MVBench.get_index picks frames" in clip_problem(outside, source)  # VLMEvalKit opens a missing file


def test_repeated_frames_are_ordinary_frames_to_patches_and_cap() -> None:
    """32 frames of a 10-frame clip: 16 temporal patches of 2 (a repeated pair is a still patch), the cap
    split over 16, each patch timed at its frames' mean time, as any 32-frame clip."""
    config = json.loads((PUBLISHED / "preprocessor_config.json").read_text())
    processor = Qwen2VLImageProcessorPil(
        size={"shortest_edge": config["min_pixels"], "longest_edge": config["max_pixels"]},
        patch_size=config["patch_size"],
        temporal_patch_size=config["temporal_patch_size"],
        merge_size=config["merge_size"],
        image_mean=config["image_mean"],
        image_std=config["image_std"],
    )
    indices = tuple(int(i * 10 / 33) for i in range(1, 33))
    frames = tuple(Image.new("RGB", (1280, 720), (20 * i, 5 * i, 255 - 20 * i)) for i in indices)
    clip = Video(frames, indices, 8.0, 10, "short.mp4", max_tokens=12288)
    rows, grid = video_patches(clip, processor)
    t, h, w = (int(v) for v in grid)
    assert t == 16 and 12288 // 32 < h * w // 4 <= 12288 // 16  # the cap over 16 patches, not 32 frames
    per_patch = rows.view(t, h * w, 3, 2, 14 * 14)
    for group in range(t):
        pair = indices[2 * group : 2 * group + 2]
        still = torch.equal(per_patch[group, :, :, 0], per_patch[group, :, :, 1])
        assert still == (pair[0] == pair[1]), f"temporal patch {group}: frames {pair}"
    expected = [(indices[i] / 8.0 + indices[i + 1] / 8.0) / 2 for i in range(0, 32, 2)]
    assert group_timestamps(clip, 2) == pytest.approx(expected)
