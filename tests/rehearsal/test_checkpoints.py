"""The rehearsal's tiny checkpoints (``sparsectx.rehearsal.checkpoints``) are the real ones in miniature.

For every model preset of the two real experiment presets (SCOPD: qwen2_5_vl_7b, qwen3_vl_4b; LT-OPD:
qwen3_5_4b, qwen3_5_9b, glm46v_9b, llava_onevision_qwen2_7b): the written folder declares the published
model_type and architectures, keeps the published geometry and layer pattern, loads through the project's
loader as the published HF class with the family's adapter, passes the preflight, renders prompts with the
published template, names the published token strings by its ids, and generates on CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from engine_setup import default_engine
from family_models import hf_image_processor
from omegaconf import OmegaConf
from tiny_models import noise_image
from transformers import AutoConfig, AutoTokenizer

from sparsectx.context import keep_all
from sparsectx.encoding import encode_samples
from sparsectx.engine import DecodeEngine, pruned_prompts
from sparsectx.generation import SamplingConfig
from sparsectx.models.families import FAMILIES
from sparsectx.models.loading import ModelConfig, load_model
from sparsectx.models.published import MODEL_CONF_DIR, model_hub_id, published_folder
from sparsectx.preflight.checkpoint import check_checkpoint
from sparsectx.prompting import PromptItem
from sparsectx.rehearsal.checkpoints import (
    PUBLISHED_FILES,
    published_files,
    write_tiny_checkpoint,
)

MODELS = ["qwen2_5_vl_7b", "qwen3_vl_4b", "qwen3_5_4b", "qwen3_5_9b", "glm46v_9b", "llava_onevision_qwen2_7b"]
"""The model presets of conf/experiment/scopd_qwen2_5_vl_7b.yaml and ltopd_qwen3_5_4b.yaml that transformers
5.17 loads (llava_onevision_1_5_4b has remote code only; llava_onevision_qwen2_7b stands in for it)."""
GEOMETRY = ("patch_size", "spatial_merge_size", "temporal_patch_size", "image_size", "num_position_embeddings")
MESSAGES = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is shown?"}]}]


def _published(model: str) -> Path:
    """Returns the published folder of ``model``, skipping the test while its files are not all kept."""
    folder = published_folder(model_hub_id(model))
    missing = [name for name in PUBLISHED_FILES if not (folder / name).is_file()]
    if missing:
        pytest.skip(f"{folder.name}: published {', '.join(missing)} not kept yet (see SOURCES.md)")
    return folder


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """Returns a function: model preset -> (published folder, its tiny checkpoint, written once per module)."""
    cache: dict[str, tuple[Path, Path]] = {}

    def get(model: str) -> tuple[Path, Path]:
        if model not in cache:
            published = _published(model)
            cache[model] = (published, write_tiny_checkpoint(model, tmp_path_factory.mktemp(model)))
        return cache[model]

    return get


def _model_config(model: str, path: Path) -> ModelConfig:
    """Returns the preset's ``model`` config with ``model.path=<path> model.device=cpu model.dtype=float32``."""
    values = OmegaConf.to_container(OmegaConf.load(MODEL_CONF_DIR / f"{model}.yaml"))
    return ModelConfig(**{**values, "path": str(path), "device": "cpu", "dtype": "float32"})


def _hf(folder: Path):  # noqa: ANN202
    return AutoConfig.from_pretrained(folder)


@pytest.mark.parametrize("model", MODELS)
def test_config_is_the_published_one_in_miniature(model: str, written) -> None:  # noqa: ANN001
    published, out = written(model)
    declared, tiny = json.loads((published / "config.json").read_text()), json.loads((out / "config.json").read_text())
    assert (tiny["model_type"], tiny["architectures"]) == (declared["model_type"], declared["architectures"])
    big, small = _hf(published), _hf(out)
    for key in GEOMETRY:
        assert getattr(small.vision_config, key, None) == getattr(big.vision_config, key, None), key
    text = small.get_text_config()
    assert text.hidden_size == 64 < big.get_text_config().hidden_size
    rope = text.rope_parameters
    if rope.get("mrope_section"):  # sections over the rotary pairs of the shrunk head
        head = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        assert 2 * sum(rope["mrope_section"]) == int(head * rope.get("partial_rotary_factor", 1.0))
    assert (out / "model.safetensors").stat().st_size < 5 * 2**20


@pytest.mark.parametrize("model", MODELS)
def test_layer_pattern_is_kept_in_miniature(model: str, written) -> None:  # noqa: ANN001
    published, out = written(model)
    big, small = _hf(published), _hf(out)
    family = FAMILIES.for_model_type(small.model_type).name
    vision, published_vision = small.vision_config, big.vision_config
    if family == "qwen2_5_vl":  # windowed blocks, each period closed by a full-attention block, as published
        full = vision.fullatt_block_indexes
        assert len(full) == len(published_vision.fullatt_block_indexes) and full[-1] == vision.depth - 1
        assert set(range(vision.depth)) - set(full) and vision.window_size == published_vision.window_size
    if family == "qwen3_vl":  # as many DeepStack taps inside the tower, each reaching its own decoder layer
        taps = vision.deepstack_visual_indexes
        assert len(taps) == len(published_vision.deepstack_visual_indexes) and max(taps) < vision.depth - 1
        assert small.text_config.num_hidden_layers > len(taps)
    if family == "qwen3_5":  # one period of the published hybrid pattern: linear layers, then a full one
        types, published_types = small.text_config.layer_types, big.text_config.layer_types
        assert {"linear_attention", "full_attention"} == set(types) and types[-1] == "full_attention"
        assert published_types == types * (len(published_types) // len(types))
    if family == "glm46v":
        assert small.text_config.rope_parameters["partial_rotary_factor"] == 0.5
        assert small.text_config.rope_parameters["partial_rotary_factor"] == big.text_config.partial_rotary_factor
    if family == "llava_onevision":
        for key in ("vision_feature_layer", "vision_feature_select_strategy", "image_grid_pinpoints"):
            assert getattr(small, key) == getattr(big, key), key
        assert small.vision_aspect_ratio == big.vision_aspect_ratio == "anyres_max_9"


@pytest.mark.parametrize("model", MODELS)
def test_token_ids_name_the_published_strings(model: str, written) -> None:  # noqa: ANN001
    published, out = written(model)
    spec = FAMILIES.for_config(json.loads((published / "config.json").read_text()), model)
    tokenizer = AutoTokenizer.from_pretrained(out)
    declared, tiny = json.loads((published / "config.json").read_text()), json.loads((out / "config.json").read_text())
    checked = 0
    for big, small in ((declared, tiny), (declared.get("text_config", {}), tiny.get("text_config", {}))):
        for key, value in big.items():
            if key.endswith(("_token_id", "_token_index")) and value is not None:
                ids = value if isinstance(value, list) else [value]
                moved = small[key] if isinstance(small[key], list) else [small[key]]
                assert tokenizer.convert_ids_to_tokens(moved) == [spec.special_tokens[i] for i in ids], key
                checked += 1
    assert checked >= 2  # at least the image and video tokens
    assert tiny.get("text_config", tiny)["vocab_size"] == len(tokenizer)


@pytest.mark.parametrize("model", MODELS)
def test_loads_through_the_project_loader_as_the_published_class(model: str, written) -> None:  # noqa: ANN001
    published, out = written(model)
    declared = json.loads((published / "config.json").read_text())
    loaded = load_model(_model_config(model, out))
    hf_class = getattr(transformers, declared["architectures"][0])
    assert type(loaded.adapter.model) is hf_class
    torch.manual_seed(0)  # every written weight is loaded, none re-initialised by from_pretrained
    rebuilt = hf_class(_hf(out)).state_dict()
    assert all(torch.equal(tensor, rebuilt[name]) for name, tensor in loaded.adapter.model.state_dict().items())
    assert loaded.adapter.family == FAMILIES.for_config(declared, model).name == loaded.processor.spec.name
    assert type(loaded.processor.image_processor) is type(hf_image_processor(published))
    template = json.loads((published / "tokenizer_config.json").read_text())["chat_template"]
    tokenizer = AutoTokenizer.from_pretrained(out)
    expected = tokenizer.apply_chat_template(
        MESSAGES, chat_template=template, tokenize=False, add_generation_prompt=True
    )
    assert loaded.processor.apply_chat_template(MESSAGES, False, True) == expected
    assert expected.count(loaded.processor.spec.image_marker) == 1


@pytest.mark.parametrize("model", MODELS)
def test_the_preflight_accepts_it(model: str, written) -> None:  # noqa: ANN001
    _, out = written(model)
    checked = check_checkpoint(model, _model_config(model, out), sample_size=(64, 48))
    assert checked.problems == [], [problem.line() for problem in checked.problems]


@torch.no_grad()
@pytest.mark.parametrize("model", MODELS)
def test_greedy_generation_runs_on_cpu(model: str, written) -> None:  # noqa: ANN001
    _, out = written(model)
    loaded = load_model(_model_config(model, out))
    adapter, processor = loaded.adapter, loaded.processor
    samples = encode_samples(adapter, processor, [PromptItem("0", [noise_image(64, 48, 1)], "what?", "sys", "")])
    engine = DecodeEngine(adapter, processor.tokenizer, default_engine())
    greedy = SamplingConfig(4, False, 1.0, 1.0, 0, [], honour_stops=False)
    (generated,) = engine.generate(pruned_prompts(adapter, samples, [keep_all(s) for s in samples]), greedy)
    assert generated.token_ids.numel() == 4 and int(generated.token_ids.max()) < len(processor.tokenizer)


def test_the_same_seed_writes_the_same_bytes(tmp_path: Path) -> None:
    first, again, other = (
        write_tiny_checkpoint("qwen3_5_4b", tmp_path / name, seed) for name, seed in (("a", 0), ("b", 0), ("c", 1))
    )
    weights = [(folder / "model.safetensors").read_bytes() for folder in (first, again, other)]
    assert weights[0] == weights[1] != weights[2]


def test_missing_presets_and_published_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="model='qwen9'.*model presets: .*qwen2_5_vl_7b"):
        write_tiny_checkpoint("qwen9", tmp_path / "x")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="lacks preprocessor_config.json, tokenizer_config.json"):
        published_files(tmp_path)
