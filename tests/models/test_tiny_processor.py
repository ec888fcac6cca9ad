"""The locally built tokenizer/processor: hub layout, offline loading, 256 image pads, full text coverage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from PIL import Image
from transformers import AutoTokenizer
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from sparsectx.data.build import BuildConfig, load_build_config
from sparsectx.data.prompt import build_messages
from sparsectx.data.scenes import RELATION_PHRASES, plural
from sparsectx.data.synthetic import corpus_pairs
from sparsectx.models.processor import load_processor
from sparsectx.models.tiny_processor import (
    SPECIAL_TOKENS,
    TAG_TOKENS,
    build_processor,
    chat_texts,
    image_token_count,
)

REPO = Path(__file__).resolve().parents[2]
CORPUS_PER_FAMILY = 60


@pytest.fixture(scope="module")
def build_cfg() -> BuildConfig:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return load_build_config(compose(config_name="build_data"))


def _build(cfg: BuildConfig, out_dir: Path) -> Path:
    pairs = corpus_pairs(cfg.data, CORPUS_PER_FAMILY)
    proc = cfg.processor
    build_processor(
        out_dir=out_dir,
        texts=chat_texts(pairs, cfg.data.prompt.system, cfg.data.prompt.instruction),
        vocab_size=proc.vocab_size,
        min_frequency=proc.min_frequency,
        image_size=cfg.data.scene.image_size,
        patch_size=proc.patch_size,
        merge_size=proc.merge_size,
        temporal_patch_size=proc.temporal_patch_size,
    )
    return out_dir


@pytest.fixture(scope="module")
def proc_dir(build_cfg: BuildConfig, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(build_cfg, tmp_path_factory.mktemp("tiny-vlm"))


@pytest.fixture(scope="module")
def tokenizer(proc_dir: Path):
    return AutoTokenizer.from_pretrained(str(proc_dir))


def test_hub_layout_and_deterministic_build(build_cfg: BuildConfig, proc_dir: Path, tmp_path: Path) -> None:
    names = {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "processor_config.json"}
    assert {p.name for p in proc_dir.iterdir()} == names
    again = _build(build_cfg, tmp_path / "again")
    for name in names:
        assert (proc_dir / name).read_bytes() == (again / name).read_bytes(), name
    config = json.loads((proc_dir / "processor_config.json").read_text())
    assert config["processor_class"] == "Qwen2_5_VLProcessor"
    assert config["image_processor"]["size"] == {"shortest_edge": 448 * 448, "longest_edge": 448 * 448}


def test_special_and_tag_tokens_are_single_tokens_with_fixed_ids(tokenizer, build_cfg: BuildConfig) -> None:
    assert len(tokenizer) <= build_cfg.processor.vocab_size <= 1024
    for expected_id, token in enumerate((*SPECIAL_TOKENS, *TAG_TOKENS)):
        assert tokenizer.convert_tokens_to_ids(token) == expected_id
        assert tokenizer(token, add_special_tokens=False).input_ids == [expected_id]
    trace = "<think>I see 3 red circles.</think><answer>3</answer>"
    ids = tokenizer(trace, add_special_tokens=False).input_ids
    assert len(ids) <= 12
    assert tokenizer.decode(ids, skip_special_tokens=True) == trace  # tags are not "special": they survive
    assert tokenizer.decode([tokenizer.convert_tokens_to_ids("<|im_end|>")], skip_special_tokens=True) == ""
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"


def _vocabulary_sentences(cfg: BuildConfig) -> list[str]:
    scene = cfg.data.scene
    words = [*scene.colors, *scene.shapes, *(plural(s) for s in scene.shapes), *RELATION_PHRASES.values()]
    words += [*RELATION_PHRASES, "yes", "no", *"ABCDEFGHIJKLMNOPQRSTUVWXYZ", *"0123456789"]
    return [" ".join(words), *(f"<answer>{w}</answer>" for w in words)]


def test_no_unknown_tokens_on_any_generated_text(tokenizer, build_cfg: BuildConfig) -> None:
    # Fresh items from another seed than the training corpus, rendered as full chats, plus every word.
    fresh = corpus_pairs(replace(build_cfg.data, seed=build_cfg.data.seed + 1), 40)
    texts = chat_texts(fresh, build_cfg.data.prompt.system, build_cfg.data.prompt.instruction)
    texts += [q for q, _ in fresh] + [t for _, t in fresh] + _vocabulary_sentences(build_cfg)
    assert tokenizer.unk_token_id is None
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False).input_ids
        assert all(0 <= i < len(tokenizer) for i in ids)
        assert tokenizer.decode(ids, skip_special_tokens=False) == text


def test_ocr_words_are_one_token_per_letter(tokenizer) -> None:
    ids = tokenizer("<answer>QZXJK</answer>", add_special_tokens=False).input_ids
    assert tokenizer.convert_ids_to_tokens(ids) == ["<answer>", "Q", "Z", "X", "J", "K", "</answer>"]


def test_chat_template_renders_the_prompt_protocol(tokenizer, build_cfg: BuildConfig) -> None:
    prompt = build_cfg.data.prompt
    messages = build_messages("How many red circles are there?", prompt.system, prompt.instruction, None)
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        f"<|im_start|>system\n{prompt.system}<|im_end|>\n<|im_start|>user\n"
        "<|vision_start|><|image_pad|><|vision_end|>"
        f"How many red circles are there?\n{prompt.instruction}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    full = [*messages, {"role": "assistant", "content": "<think>x</think><answer>1</answer>"}]
    assert (
        tokenizer.apply_chat_template(full, tokenize=False)
        == chat_texts(
            [("How many red circles are there?", "<think>x</think><answer>1</answer>")],
            prompt.system,
            prompt.instruction,
        )[0]
    )


def test_image_processor_keeps_448_and_gives_256_tokens(proc_dir: Path) -> None:
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(str(proc_dir))
    out = image_processor(images=[Image.new("RGB", (448, 448), (200, 10, 10))], return_tensors="pt")
    assert out["image_grid_thw"].tolist() == [[1, 32, 32]]
    assert out["pixel_values"].shape == (1024, 3 * 2 * 14 * 14)
    assert image_token_count(448, 14, 2) == 256


def test_project_processor_expands_one_image_to_256_pads(proc_dir: Path, build_cfg: BuildConfig) -> None:
    processor = load_processor(proc_dir)
    prompt = build_cfg.data.prompt
    text = processor.apply_chat_template(
        build_messages("Q?", prompt.system, prompt.instruction, None),
        tokenize=False,
        add_generation_prompt=True,
    )
    batch = processor(text=[text], images=[Image.new("RGB", (448, 448))])
    tokens = processor.tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist())
    start = tokens.index("<|vision_start|>")
    assert tokens[start + 1 : start + 257] == ["<|image_pad|>"] * 256 and tokens[start + 257] == "<|vision_end|>"


AUTO_PROCESSOR_CHECK = textwrap.dedent(
    """
    import json, sys
    try:
        import torchvision  # noqa: F401  transformers' Qwen2.5-VL processor requires it
    except Exception as error:
        print(json.dumps({"skip": f"torchvision does not import: {type(error).__name__}"}))
        sys.exit(0)
    from PIL import Image
    from transformers import AutoProcessor
    processor = AutoProcessor.from_pretrained(sys.argv[1])
    messages = [{"role": "system", "content": [{"type": "text", "text": "S"}]},
                {"role": "user", "content": [{"type": "image", "image": Image.new("RGB", (448, 448))},
                                             {"type": "text", "text": "Q?"}]}]
    out = processor.apply_chat_template(messages, tokenize=True, return_dict=True,
                                        add_generation_prompt=True, return_tensors="pt")
    tokens = processor.tokenizer.convert_ids_to_tokens(out["input_ids"][0].tolist())
    print(json.dumps({"class": type(processor).__name__, "tokens": tokens,
                      "grid": out["image_grid_thw"].tolist()}))
    """
)


def test_auto_processor_loads_offline_and_expands_256_pads(proc_dir: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", AUTO_PROCESSOR_CHECK, str(proc_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(result["skip"])
    tokens = result["tokens"]
    assert result["class"] == "Qwen2_5_VLProcessor" and result["grid"] == [[1, 32, 32]]
    start = tokens.index("<|vision_start|>")
    assert tokens[start + 1 : start + 257] == ["<|image_pad|>"] * 256 and tokens[start + 257] == "<|vision_end|>"
    assert tokens.count("<|image_pad|>") == 256
