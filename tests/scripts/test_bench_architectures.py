"""The benchmark scripts build each real architecture from the published ``config.json`` the project keeps
(``sparsectx/assets/published/<checkpoint>/``, the checkpoint that ``conf/model/<arch>.yaml`` names), not from
dimensions copied by hand into ``scripts/bench_common.py``.

``DIMENSIONS`` and ``PARAMETERS`` are what the hand-copied dicts built (commit d42f31e, counted on the meta
device before they were deleted): building from the published files changed no dimension and no parameter.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForImageTextToText

from sparsectx.models import resolve_model_path
from sparsectx.models.families import FAMILIES
from sparsectx.models.processor import load_processor
from sparsectx.models.published import model_hub_id, published_config, published_folder

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))

import bench_common  # noqa: E402

TEXT = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")
VISION = ("depth", "hidden_size", "intermediate_size", "num_heads", "patch_size", "out_hidden_size")
DIMENSIONS = {
    "qwen2_5_vl_7b": ((3584, 18944, 28, 28, 4, 152064), (32, 1280, 3420, 16, 14, 3584)),
    "qwen3_vl_4b": ((2560, 9728, 36, 32, 8, 151936), (24, 1024, 4096, 16, 16, 2560)),
    "qwen3_5_4b": ((2560, 9216, 32, 16, 4, 248320), (24, 1024, 4096, 16, 16, 2560)),
    "qwen3_5_9b": ((4096, 12288, 32, 16, 4, 248320), (27, 1152, 4304, 16, 16, 4096)),
    "glm46v_9b": ((4096, 13696, 40, 32, 2, 151552), (24, 1536, 13696, 12, 14, 4096)),
}
"""Per ``--arch``: (text ``TEXT`` + ``vocab_size``, vision ``VISION``) as the hand-copied dicts stated them."""
PARAMETERS = {
    "qwen2_5_vl_7b": 8_292_166_656,
    "qwen3_vl_4b": 4_437_815_808,
    "qwen3_5_4b": 4_539_265_536,
    "qwen3_5_9b": 9_409_813_744,
    "glm46v_9b": 10_292_777_472,
}
"""Every parameter of the model the hand-copied dicts built (``AutoModelForImageTextToText.from_config``)."""
VISUAL_TOKENS = {
    "qwen": {
        "image_token_id": "<|image_pad|>",
        "video_token_id": "<|video_pad|>",
        "vision_start_token_id": "<|vision_start|>",
        "vision_end_token_id": "<|vision_end|>",
    },
    "glm": {
        "image_token_id": "<|image|>",
        "video_token_id": "<|video|>",
        "image_start_token_id": "<|begin_of_image|>",
        "image_end_token_id": "<|end_of_image|>",
        "video_start_token_id": "<|begin_of_video|>",
        "video_end_token_id": "<|end_of_video|>",
    },
}
"""The config keys the scripts set to the prompt tokenizer's ids, by token, as their tables stated them."""


def test_the_choices_are_the_presets_whose_published_files_are_kept():
    assert sorted(bench_common.ARCHITECTURES) == sorted(DIMENSIONS)


@pytest.mark.parametrize("arch", sorted(DIMENSIONS))
def test_the_built_architecture_is_the_published_one(arch):
    config = bench_common.architecture(None, arch)
    published = AutoConfig.from_pretrained(published_folder(model_hub_id(arch)))
    assert config.to_dict() == published.to_dict()
    text, vision = config.get_text_config(), config.vision_config
    assert [getattr(text, key) for key in (*TEXT, "vocab_size")] == list(DIMENSIONS[arch][0])
    assert [getattr(vision, key) for key in VISION] == list(DIMENSIONS[arch][1])
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    assert sum(p.numel() for p in model.parameters()) == PARAMETERS[arch]


@pytest.mark.parametrize("arch", sorted(DIMENSIONS))
def test_the_visual_tokens_are_read_through_the_family_record(arch, tmp_path):
    assert bench_common.visual_tokens(arch) == VISUAL_TOKENS["glm" if arch.startswith("glm") else "qwen"]
    processor = bench_common.bench_processor(arch, 1, tmp_path)
    assert processor.image_token == FAMILIES.for_config(published_config(model_hub_id(arch)), arch).image_marker
    config = bench_common.architecture(None, arch, processor.tokenizer)
    for key, token in bench_common.visual_tokens(arch).items():
        assert (
            getattr(config, key) == processor.tokenizer.convert_tokens_to_ids(token) != processor.tokenizer.unk_token_id
        )


def test_config_dir_still_replaces_the_published_file(tmp_path):
    tiny = resolve_model_path("package:tiny-vlm")
    config = bench_common.architecture(str(tiny), "qwen2_5_vl_7b", load_processor(tiny).tokenizer)
    assert config.vision_config.depth == AutoConfig.from_pretrained(tiny).vision_config.depth != 32
