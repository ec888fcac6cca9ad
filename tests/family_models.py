"""Tiny random-weight GLM-4.6V and LLaVA-OneVision models and character-level processors, built in code.

The real HF classes (``Glm46VForConditionalGeneration``, ``LlavaOnevisionForConditionalGeneration``) with
tiny dimensions, beside ``tiny_models.py``'s Qwen builders; nothing is downloaded.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast
from transformers.models.glm46v import Glm46VConfig, Glm46VForConditionalGeneration
from transformers.models.glm46v.image_processing_pil_glm46v import Glm46VImageProcessorPil
from transformers.models.llava_onevision import LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration
from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
    LlavaOnevisionImageProcessorPil,
)

from sparsectx.models.processor import load_processor
from sparsectx.models.published import PUBLISHED_DIR
from sparsectx.rehearsal.checkpoints import char_tokenizer, write_processor_files

GLM_SPECIALS = [
    "<|endoftext|>",
    "[gMASK]",
    "<sop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|image|>",
    "<|video|>",
    "<|begin_of_video|>",
    "<|end_of_video|>",
]
GLM_TEMPLATE = (
    "[gMASK]<sop>{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for c in message['content'] %}"
    "{% if c['type'] == 'image' %}<|begin_of_image|><|image|><|end_of_image|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
LLAVA_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>"]
LLAVA_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for c in message['content'] %}"
    "{% if c['type'] == 'image' %}<image>\n{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% endif %}"
)
LLAVA_VIEW = 32  # SigLIP image size: 4 x 4 patches of 8 pixels per view
LLAVA_PINPOINTS = [[32, 32], [32, 64], [64, 32], [64, 64], [32, 96], [96, 32]]


def _char_tokenizer(specials: list[str], eos: str, template: str) -> PreTrainedTokenizerFast:
    tok = char_tokenizer(specials, eos, "<|endoftext|>")
    tok.chat_template = template
    return tok


def _text(tok: PreTrainedTokenizerFast, layers: int) -> dict:
    return {
        "vocab_size": len(tok),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 512,
        "bos_token_id": tok.pad_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
    }


def glm_processor_dir(tmp: Path) -> PreTrainedTokenizerFast:
    """Returns the GLM character tokenizer, saved with a GLM image processor (patch 14, merge 2) in ``tmp``."""
    tok = _char_tokenizer(GLM_SPECIALS, "<|user|>", GLM_TEMPLATE)
    side = 28
    images = Glm46VImageProcessorPil(size={"shortest_edge": (2 * side) ** 2, "longest_edge": (8 * side) ** 2})
    tok.save_pretrained(tmp)
    images.save_pretrained(tmp)
    return tok


def tiny_glm46v(tok: PreTrainedTokenizerFast, seed: int, layers: int = 2) -> Glm46VForConditionalGeneration:
    """Returns a random-weight GLM-4.6V: 2 vision blocks, a ``layers``-layer GLM-4 decoder (partial rotary)."""
    torch.manual_seed(seed)
    get = tok.convert_tokens_to_ids
    config = Glm46VConfig(
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 64,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "image_size": 56,
        },
        text_config={
            **_text(tok, layers),
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [2, 1, 1],
                "partial_rotary_factor": 0.5,
            },
        },
        image_token_id=get("<|image|>"),
        video_token_id=get("<|video|>"),
        image_start_token_id=get("<|begin_of_image|>"),
        image_end_token_id=get("<|end_of_image|>"),
        video_start_token_id=get("<|begin_of_video|>"),
        video_end_token_id=get("<|end_of_video|>"),
    )
    config._attn_implementation = "sdpa"
    return Glm46VForConditionalGeneration(config).eval()


def llava_processor_dir(tmp: Path) -> PreTrainedTokenizerFast:
    """Returns the LLaVA character tokenizer, saved with a LLaVA-OneVision image processor in ``tmp``."""
    tok = _char_tokenizer(LLAVA_SPECIALS, "<|im_end|>", LLAVA_TEMPLATE)
    images = LlavaOnevisionImageProcessorPil(
        size={"height": LLAVA_VIEW, "width": LLAVA_VIEW}, image_grid_pinpoints=LLAVA_PINPOINTS
    )
    tok.save_pretrained(tmp)
    images.save_pretrained(tmp)
    return tok


def tiny_llava_onevision(
    tok: PreTrainedTokenizerFast, seed: int, layers: int = 2, aspect: str = "anyres_max_9"
) -> LlavaOnevisionForConditionalGeneration:
    """Returns a random-weight LLaVA-OneVision: a 3-layer SigLIP (32 px views, 16 patches), a Qwen2 decoder."""
    torch.manual_seed(seed)
    get = tok.convert_tokens_to_ids
    config = LlavaOnevisionConfig(
        vision_config={
            "model_type": "siglip_vision_model",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 3,
            "num_attention_heads": 2,
            "image_size": LLAVA_VIEW,
            "patch_size": 8,
        },
        text_config={"model_type": "qwen2", **_text(tok, layers), "tie_word_embeddings": False},
        image_token_index=get("<image>"),
        video_token_index=get("<video>"),
        image_grid_pinpoints=LLAVA_PINPOINTS,
        vision_aspect_ratio=aspect,
        vision_feature_layer=-1,
        vision_feature_select_strategy="full",
    )
    config._attn_implementation = "sdpa"
    return LlavaOnevisionForConditionalGeneration(config).eval()


def family_model(family: str, tmp: Path, seed: int = 0, **kwargs: object):  # noqa: ANN201
    """Returns (model, processor) of ``family`` saved to and reloaded through ``load_processor`` from ``tmp``."""
    if family == "glm46v":
        tok = glm_processor_dir(tmp)
        model = tiny_glm46v(tok, seed, **kwargs)
    else:
        tok = llava_processor_dir(tmp)
        model = tiny_llava_onevision(tok, seed, **kwargs)
    model.config.save_pretrained(tmp)
    return model, load_processor(tmp)


PUBLISHED = PUBLISHED_DIR
"""The published checkpoints' config.json, preprocessor_config.json and tokenizer_config.json (their chat
templates), in the real layout; src/sparsectx/assets/published/SOURCES.md says where each came from."""


def published_checkpoint(name: str, tmp: Path) -> Path:
    """Returns ``tmp`` holding the published files of checkpoint ``name`` (its config.json as published) and the
    rehearsal's character-level stand-in tokenizer under its tokenizer_config.json
    (``sparsectx.rehearsal.checkpoints.write_processor_files``)."""
    write_processor_files(PUBLISHED / name, tmp)
    shutil.copy(PUBLISHED / name / "config.json", tmp / "config.json")
    return tmp


def hf_image_processor(folder: Path):  # noqa: ANN201
    """Returns the image processor transformers 5.17 itself picks for ``folder`` on the PIL backend: the
    resolution ``AutoImageProcessor.from_pretrained`` runs (models/auto/image_processing_auto.py: the declared
    ``image_processor_type``, a legacy ``Fast`` suffix dropped, mapped by ``_load_backend_class``), called
    directly because the ``AutoImageProcessor`` class itself requires torchvision, which does not import here."""
    from transformers.image_processing_base import ImageProcessingMixin
    from transformers.models.auto import image_processing_auto as auto

    config, _ = ImageProcessingMixin.get_image_processor_dict(str(folder))
    declared = config["image_processor_type"]
    base = declared.removesuffix("Fast")
    return auto._load_backend_class(base, "pil", declared.endswith("Fast")).from_pretrained(str(folder))
