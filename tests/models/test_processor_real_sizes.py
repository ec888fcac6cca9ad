"""The project's processor equals transformers' own image processor on each published preprocessor_config.json
at real sizes, and ``model.max_visual_tokens`` (SCOPD's 1,280 in training, 4,096 in evaluation) holds.

Reference: the class transformers 5.17 resolves for the folder (``family_models.hf_image_processor``), run on
the same image; the project side is ``load_processor`` on the folder, called on a templated prompt.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from family_models import hf_image_processor, published_checkpoint
from PIL import Image

from sparsectx.models.processor import load_processor

SIZES = [(640, 480), (1920, 1080), (3840, 2160), (300, 7000)]
"""(width, height): VGA, full HD, 4K UHD, a tall strip."""
PATCH_FAMILIES = ["Qwen2.5-VL-7B-Instruct", "Qwen3-VL-4B-Instruct", "Qwen3.5-4B", "GLM-4.6V-Flash"]
CAPS = (1280, 4096)
"""SCOPD's caps: training images at 1,280 visual tokens, evaluation at 4,096 (SCOPD appendix, seed 004)."""


def _image(width: int, height: int) -> Image.Image:
    rng = np.random.default_rng(width * 7 + height)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def _prompt(processor, images: int) -> str:  # noqa: ANN001
    content = [*({"type": "image"} for _ in range(images)), {"type": "text", "text": "Q"}]
    return processor.apply_chat_template([{"role": "user", "content": content}], False, True)


def _project(folder: Path, image: Image.Image, cap: int | None = None):  # noqa: ANN202
    processor = load_processor(folder, max_visual_tokens=cap)
    out = processor([_prompt(processor, 1)], [image])
    marker = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    return processor, out, int((out["input_ids"] == marker).sum())


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {
        name: published_checkpoint(name, tmp_path_factory.mktemp(name.replace(".", "_")))
        for name in [*PATCH_FAMILIES, "llava-onevision-qwen2-7b-ov-hf"]
    }


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", PATCH_FAMILIES)
def test_patch_processor_equals_hf_at_real_sizes(name: str, size: tuple[int, int], folders: dict) -> None:
    image = _image(*size)
    processor, out, tokens = _project(folders[name], image)
    ref = hf_image_processor(folders[name])(images=[image], return_tensors="pt")
    assert torch.equal(out["image_grid_thw"], ref["image_grid_thw"])
    assert torch.equal(out["pixel_values"], ref["pixel_values"])
    merge = int(ref["image_grid_thw"].new_tensor(processor.image_processor.merge_size))
    assert tokens == int(ref["image_grid_thw"].prod()) // merge**2


@pytest.mark.parametrize("size", [(640, 480), (300, 7000)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_tiled_processor_equals_hf(size: tuple[int, int], folders: dict) -> None:
    folder = folders["llava-onevision-qwen2-7b-ov-hf"]
    image = _image(*size)
    processor = load_processor(folder)
    out = processor([_prompt(processor, 1)], [image])
    ref = hf_image_processor(folder)(images=[[image]], return_tensors="pt")
    assert torch.equal(out["pixel_values"], ref["pixel_values"])
    assert torch.equal(out["image_sizes"], ref["image_sizes"])


@pytest.mark.parametrize("cap", CAPS)
@pytest.mark.parametrize("name", PATCH_FAMILIES)
def test_visual_token_cap_holds_and_is_tight(name: str, cap: int, folders: dict) -> None:
    for size in SIZES:
        image = _image(*size)
        _, uncapped, natural = _project(folders[name], image)
        _, capped, tokens = _project(folders[name], image, cap)
        assert tokens <= cap, (size, tokens)
        if natural <= cap:  # the cap changes nothing an image already fits in
            assert torch.equal(capped["pixel_values"], uncapped["pixel_values"])
        else:  # and it costs no more than the rounding to whole merge units (GLM counts both temporal copies)
            assert tokens > cap * 0.8, (size, tokens)
            width, height = size
            grid = capped["image_grid_thw"][0]
            assert math.isclose(grid[1] / grid[2], height / width, rel_tol=0.2)


def test_cap_is_refused_on_tiled_family(folders: dict) -> None:
    with pytest.raises(ValueError, match="tiles its images"):
        load_processor(folders["llava-onevision-qwen2-7b-ov-hf"], max_visual_tokens=1280)
