"""Each family's published checkpoint files (src/sparsectx/assets/published, real layout) load as the checkpoint says.

Checked per checkpoint: the family accepts its config.json, the image processor is the class transformers'
own ``AutoImageProcessor`` picks for the folder, the chat template comes from the checkpoint's file and renders
one image marker per image, and the thinking prefix is what rendering the template gives.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from family_models import PUBLISHED, hf_image_processor, published_checkpoint

from sparsectx.models.families import FAMILIES
from sparsectx.models.processor import load_processor

# checkpoint -> (family, image marker, generation prefix by model.thinking (None = template default),
#                effective thinking by model.thinking)
EXPECTED = {
    "Qwen2.5-VL-7B-Instruct": ("qwen2_5_vl", "<|image_pad|>", {None: ""}, {None: None}),
    "Qwen3-VL-4B-Instruct": ("qwen3_vl", "<|image_pad|>", {None: ""}, {None: None}),
    "Qwen3.5-4B": (
        "qwen3_5",
        "<|image_pad|>",
        {None: "<think>\n", True: "<think>\n", False: "<think>\n\n</think>\n\n"},
        {None: True, True: True, False: False},
    ),
    "GLM-4.6V-Flash": (
        "glm46v",
        "<|image|>",
        {None: "", True: "", False: "<think></think>"},
        {None: True, True: True, False: False},
    ),
    "llava-onevision-qwen2-7b-ov-hf": ("llava_onevision", "<image>", {None: ""}, {None: None}),
}


def _messages(images: int) -> list[dict]:
    return [{"role": "user", "content": [*({"type": "image"} for _ in range(images)), {"type": "text", "text": "Q"}]}]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_published_checkpoint_loads_as_declared(name: str, tmp_path: Path) -> None:
    family, marker, prefixes, thinking = EXPECTED[name]
    folder = published_checkpoint(name, tmp_path)
    declared = json.loads((PUBLISHED / name / "config.json").read_text())
    assert FAMILIES.for_model_type(declared["model_type"]).name == family
    processor = load_processor(folder)
    assert processor.spec.name == family
    assert declared["architectures"][0] in processor.spec.architectures
    hf = hf_image_processor(folder)
    assert type(processor.image_processor) is type(hf)
    assert processor.chat_template.source == str(folder / "tokenizer_config.json")
    for images in (1, 3):
        assert processor.apply_chat_template(_messages(images), False, True).count(marker) == images
    for setting, prefix in prefixes.items():
        loaded = load_processor(folder, thinking=setting)
        assert loaded.generation_prefix == prefix
        assert loaded.thinking == thinking[setting]
        assert loaded.apply_chat_template(_messages(1), False, True).endswith(prefix)


def test_glm_flash_declares_glm4v_and_is_served_by_the_glm46v_adapter() -> None:
    config = json.loads((PUBLISHED / "GLM-4.6V-Flash" / "config.json").read_text())
    assert (config["model_type"], config["architectures"]) == ("glm4v", ["Glm4vForConditionalGeneration"])
    assert FAMILIES.for_config(config, "GLM-4.6V-Flash").name == "glm46v"
    with pytest.raises(KeyError, match="Glm4vMoeForConditionalGeneration"):
        FAMILIES.for_config({**config, "architectures": ["Glm4vMoeForConditionalGeneration"]}, "x")
    with pytest.raises(KeyError, match="supported: glm46v, llava_onevision.*model_types glm46v, glm4v"):
        FAMILIES.for_config({**config, "model_type": "glm4v_moe"}, "x")


def test_missing_template_names_the_folder_and_files(tmp_path: Path) -> None:
    folder = published_checkpoint("Qwen2.5-VL-7B-Instruct", tmp_path)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(FileNotFoundError, match=r"chat_template\.jinja and chat_template\.json") as err:
        load_processor(folder)
    assert str(folder) in str(err.value)


def test_processor_template_is_used_when_the_tokenizer_has_none(tmp_path: Path) -> None:
    folder = published_checkpoint("Qwen2.5-VL-7B-Instruct", tmp_path)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    template = config.pop("chat_template")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "chat_template.json").write_text(json.dumps({"chat_template": template}))
    processor = load_processor(folder)
    assert processor.chat_template.source == str(folder / "chat_template.json")
    assert processor.apply_chat_template(_messages(2), False, True).count("<|image_pad|>") == 2


def test_template_without_image_markers_is_refused_naming_the_file(tmp_path: Path) -> None:
    folder = published_checkpoint("Qwen3-VL-4B-Instruct", tmp_path)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = config["chat_template"].replace("<|image_pad|>", "")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="tokenizer_config.json renders 0 '<\\|image_pad\\|>' markers"):
        load_processor(folder)


def test_thinking_on_a_family_without_a_switch_is_a_config_error(tmp_path: Path) -> None:
    folder = published_checkpoint("Qwen2.5-VL-7B-Instruct", tmp_path)
    with pytest.raises(ValueError, match="model.thinking=True but family 'qwen2_5_vl' has no thinking switch"):
        load_processor(folder, thinking=True)


def test_image_processor_of_another_family_is_refused(tmp_path: Path) -> None:
    folder = published_checkpoint("GLM-4.6V-Flash", tmp_path)
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    pre["image_processor_type"] = "Qwen2VLImageProcessor"
    (folder / "preprocessor_config.json").write_text(json.dumps(pre))
    with pytest.raises(ValueError, match="not one family 'glm46v' reads"):
        load_processor(folder)
