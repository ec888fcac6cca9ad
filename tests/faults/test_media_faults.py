"""Fault injection on media from the internet: image formats, pixel caps, video frames, clip paths, decode budgets.

Issue 39 (items 3 and 6): a benchmark or training file is untrusted. An image in a format outside
``conf/data/media/limits.yaml``'s ``image_formats`` never reaches its decoder (EPS would reach Ghostscript), an
image whose header claims more than ``max_image_pixels`` is refused before a pixel is decoded, video frames are
downscaled to ``max_frame_pixels`` while they decode, a clip is read only from inside its benchmark's
``video.root`` and only through an allowed container (``video_formats``: an HLS playlist could name any file),
and the items of one engine call decode within ``decode_budget_mib``. Each refusal is a counted skip naming the
row, the value and the setting to change.
"""

from __future__ import annotations

import base64
import io
import json
import struct
import zlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import av
import numpy as np
import pytest
from eval.test_runner_support import SIDE, base_overrides, build_model_dir, compose_eval, write_bench
from PIL import EpsImagePlugin, Image, ImageFile

from sparsectx.data.sources.images import check_image
from sparsectx.data.tsv import read_rows
from sparsectx.data.video import read_frame_folder, read_video_file
from sparsectx.eval.config import compose_bench
from sparsectx.eval.protocol import load_bench_items
from sparsectx.rehearsal.benchmarks import image_mcq, video, write_rows

pytestmark = pytest.mark.faults


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Returns a setter of media limits for this test: the conf file's values with the given ones changed."""
    from sparsectx.data import media

    configured = media.media_limits()

    def set_limits(**changes: object) -> None:
        changed = replace(configured, **changes)
        monkeypatch.setattr(media, "media_limits", lambda: changed)

    return set_limits


def _encoded(image: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


EPS = (
    b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 4 4\n%%EndComments\n"
    b"newpath 0 0 moveto 4 0 lineto 4 4 lineto closepath fill\nshowpage\n%%EOF\n"
)


def _png_header_only(width: int, height: int) -> bytes:
    """Returns a PNG whose header claims ``width`` x ``height`` RGB pixels, followed by one tiny IDAT chunk: a
    decoder that trusts the header allocates the full image before it finds the data short."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64))


def _mmstar_with(tmp_path: Path, cells: dict[int, bytes]) -> Path:
    """Returns MMStar.tsv in its real layout with row ``i``'s image cell replaced by base64 of ``cells[i]``."""
    rows = image_mcq.mmstar().rows
    for i, data in cells.items():
        rows[i]["image"] = base64.b64encode(data).decode("ascii")
    return write_rows(tmp_path / "MMStar.tsv", rows)


@pytest.mark.parametrize("fmt", ["EPS", "TIFF"])
def test_an_image_in_a_format_outside_the_allowlist_is_a_skip_and_never_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    ghostscript_calls: list[object] = []

    def ghostscript(*args: object, **kwargs: object) -> None:
        ghostscript_calls.append(args)
        raise OSError("Ghostscript would run here")

    monkeypatch.setattr(EpsImagePlugin, "Ghostscript", ghostscript)
    data = EPS if fmt == "EPS" else _encoded(Image.new("RGB", (8, 8), (1, 2, 3)), "TIFF")
    rows = read_rows(_mmstar_with(tmp_path, {1: data}), drop_no_image=False)
    assert [item.index for item in rows.items] == [0, 2]
    (skip,) = rows.skips
    assert skip.index == "1" and f"format {fmt}" in skip.reason and "image_formats" in skip.reason, skip
    assert ghostscript_calls == []


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")  # Pillow's own, from the header too
def test_an_image_whose_header_claims_more_than_the_pixel_cap_is_refused_before_decoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: list[tuple[int, int]] = []
    load = ImageFile.ImageFile.load

    def recording_load(self: ImageFile.ImageFile):  # noqa: ANN202
        decoded.append(self.size)
        return load(self)

    monkeypatch.setattr(ImageFile.ImageFile, "load", recording_load)
    rows = read_rows(_mmstar_with(tmp_path, {0: _png_header_only(12000, 12000)}), drop_no_image=False)
    (skip,) = rows.skips
    assert skip.index == "0" and "12000x12000" in skip.reason and "max_image_pixels" in skip.reason, skip
    assert (12000, 12000) not in decoded


def test_the_pixel_cap_is_the_configured_one_and_names_its_value(tmp_path: Path, limits) -> None:  # noqa: ANN001
    limits(max_image_pixels=4096, max_frame_pixels=4096)
    big = _encoded(Image.new("RGB", (100, 100), (9, 9, 9)), "PNG")
    rows = read_rows(_mmstar_with(tmp_path, {2: big}), drop_no_image=False)
    (skip,) = rows.skips
    assert skip.index == "2" and "100x100" in skip.reason and "max_image_pixels=4096" in skip.reason, skip
    assert len(rows.items) == 2


def test_a_training_source_image_outside_the_allowlist_is_a_counted_drop(tmp_path: Path) -> None:
    tiff = _encoded(Image.new("RGB", (64, 64), (5, 6, 7)), "TIFF")
    loaded = check_image(tiff, min_side=8, max_ratio=4.0)
    assert loaded.data is None and loaded.reason == "image format not allowed", loaded
    assert "TIFF" in loaded.detail and "image_formats" in loaded.detail
    png = _encoded(Image.new("RGB", (64, 64), (5, 6, 7)), "PNG")
    assert check_image(png, min_side=8, max_ratio=4.0).data == png


def _write_mp4(path: Path, count: int, size: tuple[int, int], fmt: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w", format=fmt) as container:
        stream = container.add_stream("mpeg4", rate=8)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        for i in range(count):
            shade = np.full((size[1], size[0], 3), (8 * i) % 256, dtype=np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(shade, format="rgb24")))
        container.mux(stream.encode())


def test_video_frames_larger_than_the_frame_cap_are_downscaled_while_they_decode(tmp_path: Path, limits) -> None:  # noqa: ANN001
    limits(max_frame_pixels=32 * 24)
    _write_mp4(tmp_path / "clip.mp4", 8, (64, 48))
    clip = read_video_file(tmp_path / "clip.mp4", 4)
    assert {frame.size for frame in clip.frames} == {(32, 24)}
    folder = tmp_path / "frames"
    folder.mkdir()
    for i in range(6):
        Image.new("RGB", (64, 48), (10 * i,) * 3).save(folder / f"{i + 1:05d}.jpg")
    assert {frame.size for frame in read_frame_folder(folder, 3, fps=3.0).frames} == {(32, 24)}
    limits(max_frame_pixels=64 * 48)  # a frame within the cap is decoded at its own size
    assert {frame.size for frame in read_video_file(tmp_path / "clip.mp4", 4).frames} == {(64, 48)}


def _mvbench(tmp_path: Path, hostile: list[dict[str, str]]) -> Path:
    """Returns the folder of an MVBench.tsv in its real layout (clips beside it) with ``hostile`` rows added."""
    real = video.mvbench()
    folder = tmp_path / "MVBench"
    folder.mkdir()
    template = real.rows[0]
    rows = [*real.rows, *({**template, **row, "index": str(3 + n)} for n, row in enumerate(hostile))]
    write_rows(folder / "MVBench.tsv", rows)
    real.media(folder)
    return folder


def test_a_clip_outside_its_benchmark_root_is_a_skipped_row(tmp_path: Path) -> None:
    outside = tmp_path / "secret" / "clip.mp4"
    _write_mp4(outside, 40, (32, 32))
    folder = _mvbench(
        tmp_path,
        [
            {"video": "../../../secret/clip.mp4"},  # prefix video/ssv2_video/ then three levels up
            {"video": str(outside)},  # an absolute path
            {"prefix": "../secret/", "video": "clip.mp4"},  # the prefix column escapes
        ],
    )
    spec = compose_bench("mvbench", [f"bench.mvbench.path={folder}"])
    items, skips, _ = load_bench_items(spec, max_skip_fraction=0.9)
    assert sorted(str(item.index) for item in items) == ["0", "1", "2"]
    assert sorted(skip.index for skip in skips) == ["3", "4", "5"]
    for skip in skips:
        assert "outside" in skip.reason and "video.root" in skip.reason and str(folder) in skip.reason, skip


def test_a_clip_in_a_container_outside_the_allowlist_is_a_skipped_row(tmp_path: Path) -> None:
    """An HLS playlist is a text file FFmpeg follows to other files: ``evil.m3u8`` names a clip outside the root,
    which would be read (and scored) as the row's clip; an MPEG-TS clip is a container no benchmark uses."""
    _write_mp4(tmp_path / "secret.mp4", 40, (32, 32))
    folder = _mvbench(tmp_path, [{"video": "evil.m3u8"}, {"video": "clip.ts"}])
    clips = folder / "video" / "ssv2_video"
    (clips / "evil.m3u8").write_text(
        "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:10\n#EXTINF:10.0,\n"
        f"{tmp_path / 'secret.mp4'}\n#EXT-X-ENDLIST\n"
    )
    _write_mp4(clips / "clip.ts", 40, (32, 32), fmt="mpegts")
    spec = compose_bench("mvbench", [f"bench.mvbench.path={folder}"])
    items, skips, _ = load_bench_items(spec, max_skip_fraction=0.9)
    assert sorted(skip.index for skip in skips) == ["3", "4"], skips
    for skip in skips:
        assert "video_formats" in skip.reason, skip


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("model"), "qwen2_5_vl", weights=True)


def test_an_engine_call_is_split_to_decode_within_the_budget(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limits
) -> None:  # noqa: ANN001
    from sparsectx.eval import runner
    from sparsectx.eval.runner import run

    calls: list[int] = []
    generate = runner.generate_rows

    def recording(loaded, items, *args):  # noqa: ANN001, ANN002, ANN202
        calls.append(len(items))
        return generate(loaded, items, *args)

    monkeypatch.setattr(runner, "generate_rows", recording)
    image_bytes = SIDE * SIDE * 3  # each item decodes to one RGB image of SIDE x SIDE
    limits(decode_budget_mib=2.5 * image_bytes / 2**20)  # two items at once, not three
    tsv = write_bench(tmp_path / "syn_count.tsv", "syn_count", 6, SIDE)
    overrides = base_overrides(model_dir, tmp_path / "results", {"syn_count": tsv}, 2)
    run(compose_eval(["bench=syn_count", *overrides, "queue_size=4", "batch_size=2"]))
    assert calls == [2, 2, 2]


def test_a_clip_that_fails_to_decode_at_generation_is_an_error_row_not_an_abort(tmp_path: Path) -> None:
    """Frame files whose headers read (so the row passes the read-time checks, which decode nothing) but whose
    data is cut off fail only when the prompt is built: that row is an ``error`` row naming the frame, the
    others are generated and scored."""
    from models.video_setup import video_family

    from sparsectx.eval.runner import run
    from sparsectx.paths import leaf_dir, predictions_path

    model = video_family("qwen2_5_vl", tmp_path / "model", layers=2)
    model.adapter.model.save_pretrained(tmp_path / "model")
    model.processor.tokenizer.save_pretrained(tmp_path / "model")  # keeps the video-part chat template
    folder = _mvbench(tmp_path, [])
    frames = folder / "video" / "tvqa" / "frames_fps3_hq" / "castle_s07e04_seg02_clip_14"  # row 2's folder
    for frame in frames.iterdir():  # each JPEG cut just after its start-of-scan marker: headers whole, no pixels
        data = frame.read_bytes()
        frame.write_bytes(data[: data.index(b"\xff\xda") + 20])
    items, skips, _ = load_bench_items(compose_bench("mvbench", [f"bench.mvbench.path={folder}"]), 0.0)
    assert not skips and "2" in {str(item.index) for item in items}  # the damage is not visible when read
    results = tmp_path / "results"
    overrides = base_overrides(tmp_path / "model", results, {"mvbench": folder}, 2)
    cap = "bench.mvbench.video.max_tokens=64"  # CPU-sized
    (out,) = run(compose_eval(["bench=mvbench", *overrides, "bench.mvbench.video.frames=4", cap, "budget=0.25"]))
    leaf = leaf_dir(results, "dev", "tiny", "base", "visionzip", 0.25)
    rows = {json.loads(line)["id"]: json.loads(line) for line in predictions_path(leaf, "mvbench").open()}
    assert rows["2"]["status"] == "error" and str(frames) in rows["2"]["error"], rows["2"]
    assert all(row["status"] != "error" for sid, row in rows.items() if sid != "2")
    assert json.loads(out.read_text())["extraction"]["error"] == 1
