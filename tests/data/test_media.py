"""The media limits (``conf/data/media/limits.yaml``) and the bounded decoders of ``sparsectx.data.media``."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image

from sparsectx.data import media
from sparsectx.data.config import MediaConfig, load_media_config
from sparsectx.data.media import FormatNotAllowedError, decode_chunks, decode_image, fitted_size
from sparsectx.data.tsv import Item
from sparsectx.data.video import VideoSource


def _encoded(fmt: str, size: tuple[int, int] = (8, 6), **save: object) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (10, 20, 30)).save(buffer, format=fmt, **save)
    return buffer.getvalue()


def test_the_shipped_limits_load_and_allow_the_formats_benchmark_files_hold() -> None:
    limits = load_media_config()
    assert {"JPEG", "PNG"} <= set(limits.image_formats)
    for fmt in limits.image_formats:
        assert decode_image(_encoded(fmt), "image").size == (8, 6)
    phone_photo = _encoded("MPO", save_all=True, append_images=[Image.new("RGB", (8, 6))])
    assert decode_image(phone_photo, "image").size == (8, 6)  # an MPO opens through the JPEG plugin
    with pytest.raises(FormatNotAllowedError, match=r"row 3 image is in format TIFF, not one of image_formats"):
        decode_image(_encoded("TIFF"), "row 3 image")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"image_formats": ["JPG"]}, r"image_formats=\['JPG'\].*\['JPG'\]; name formats Pillow opens"),
        ({"image_formats": []}, r"image_formats=\[\].*empty"),
        ({"video_formats": ["mp4,avi"]}, r"video_formats=.*one FFmpeg demuxer per entry"),
        ({"decode_budget_mib": 0}, r"decode_budget_mib=0 .* must be > 0"),
        ({"max_frame_pixels": 10**9}, r"max_frame_pixels=1000000000 .* exceeds max_image_pixels"),
    ],
)
def test_bad_limits_are_refused_naming_the_key(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replace(load_media_config(), **changes)


def test_a_frame_is_fitted_within_the_frame_cap_keeping_its_aspect() -> None:
    cap = load_media_config().max_frame_pixels
    width, height = fitted_size((3840, 2160))
    assert width * height <= cap and abs(width / height - 16 / 9) < 0.01 and width >= 1900
    assert fitted_size((1920, 1080)) == (1920, 1080)
    assert fitted_size((10**7, 1)) == (cap, 1) and fitted_size((1, 10**7)) == (1, cap)


def _item(index: int, side: int) -> Item:
    return Item(index, _encoded("PNG", (side, side)), "q", {}, "a", "", "", "", "", "", {})


def test_decode_chunks_split_a_call_only_within_it(monkeypatch: pytest.MonkeyPatch) -> None:
    items = [_item(i, 10 if i != 2 else 44) for i in range(7)]  # item 2 decodes to 19 times the others
    limits: MediaConfig = media.media_limits()
    monkeypatch.setattr(media, "media_limits", lambda: replace(limits, decode_budget_mib=2000 * 3 / media.MIB))
    calls = [[item.index for item in call] for call in decode_chunks(items, 4, None)]
    assert calls == [[0, 1], [2], [3], [4, 5, 6]]  # the 4-item calls, split where 2000 pixels would be exceeded
    monkeypatch.setattr(media, "media_limits", lambda: limits)
    assert [len(call) for call in decode_chunks(items, 4, None)] == [4, 3]  # a budget that never binds


def test_a_video_row_counts_its_frames_at_the_frame_cap(tmp_path: Path) -> None:
    source = VideoSource(tmp_path / "v.tsv", tmp_path, ".mp4", 32, 1000, 1.0)
    video_item = replace(_item(0, 1), image_bytes=b"", video="clip")
    assert media.item_decoded_bytes(video_item, source) == 3 * 32 * load_media_config().max_frame_pixels
