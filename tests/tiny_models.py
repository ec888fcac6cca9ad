"""Tiny random-weight Qwen2.5-VL / Qwen3-VL models and a character-level processor, built in code.

Nothing is downloaded: these are the real HF classes with tiny dimensions, so every code path the
real checkpoints take is exercised on CPU in milliseconds.
"""

from __future__ import annotations

import string
from pathlib import Path

import torch
from PIL import Image
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
from transformers.models.qwen2_5_vl import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen3_vl import Qwen3VLConfig, Qwen3VLForConditionalGeneration

from sparsectx.models.processor import ImageTextProcessor

SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for c in message['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def char_processor(patch_size: int, tmp: Path) -> ImageTextProcessor:
    """Returns a character-level processor saved to and reloaded from ``tmp`` (images up to 8x8 merged tokens)."""
    vocab = {tok: i for i, tok in enumerate([*SPECIALS, "<unk>", *string.printable])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    core.add_special_tokens(SPECIALS)
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token="<unk>"
    )
    tok.chat_template = TEMPLATE
    side = patch_size * 2
    images = Qwen2VLImageProcessorPil(
        min_pixels=(2 * side) ** 2,
        max_pixels=(8 * side) ** 2,
        patch_size=patch_size,
        merge_size=2,
        temporal_patch_size=2,
    )
    tok.save_pretrained(tmp)
    images.save_pretrained(tmp)
    from sparsectx.models.processor import load_processor

    return load_processor(tmp)


def _ids(tok: PreTrainedTokenizerFast) -> dict[str, int]:
    get = tok.convert_tokens_to_ids
    return {
        "image_token_id": get("<|image_pad|>"),
        "video_token_id": get("<|video_pad|>"),
        "vision_start_token_id": get("<|vision_start|>"),
        "vision_end_token_id": get("<|vision_end|>"),
    }


def _text_ids(tok: PreTrainedTokenizerFast) -> dict[str, int]:
    return {"bos_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}


def tiny_qwen2_5_vl(tok: PreTrainedTokenizerFast, seed: int, layers: int = 2) -> Qwen2_5_VLForConditionalGeneration:
    """Returns a random-weight Qwen2.5-VL: 2 vision blocks (one windowed, one full), a ``layers``-layer LLM."""
    torch.manual_seed(seed)
    config = Qwen2_5_VLConfig(
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 64,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 56,
            "fullatt_block_indexes": [1],
        },
        text_config={
            "vocab_size": len(tok),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": layers,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 512,
            **_text_ids(tok),
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
        },
        **_ids(tok),
    )
    config._attn_implementation = "sdpa"
    return Qwen2_5_VLForConditionalGeneration(config).eval()


def tiny_qwen3_vl(tok: PreTrainedTokenizerFast, seed: int, layers: int = 2) -> Qwen3VLForConditionalGeneration:
    """Returns a random-weight Qwen3-VL: 3 vision blocks, DeepStack at blocks 0 and 1, a ``layers``-layer LLM."""
    torch.manual_seed(seed)
    config = Qwen3VLConfig(
        vision_config={
            "depth": 3,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 64,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "num_position_embeddings": 64,
            "deepstack_visual_indexes": [0, 1],
        },
        text_config={
            "vocab_size": len(tok),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": layers,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "max_position_embeddings": 512,
            **_text_ids(tok),
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [2, 3, 3],
                "mrope_interleaved": True,
            },
        },
        **_ids(tok),
    )
    config._attn_implementation = "sdpa"
    return Qwen3VLForConditionalGeneration(config).eval()


def noise_image(width: int, height: int, seed: int) -> Image.Image:
    """Returns a deterministic random RGB image."""
    gen = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, (height, width, 3), generator=gen, dtype=torch.uint8)
    return Image.fromarray(pixels.numpy())
