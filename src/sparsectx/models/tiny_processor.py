"""Builds the tiny model's tokenizer and Qwen2.5-VL processor locally and saves them in the hub layout.

The tokenizer is a byte-level BPE trained by the ``tokenizers`` library on the synthetic suite's own
chats, so no text can produce an unknown token, with Qwen's special tokens and single-token
``<think>``/``</think>``/``<answer>``/``</answer>``. The saved folder holds the files a Qwen2.5-VL hub
checkpoint holds (``tokenizer.json``, ``tokenizer_config.json``, ``chat_template.jinja``,
``processor_config.json``), so ``AutoProcessor.from_pretrained(folder)`` loads it offline and
``apply_chat_template`` expands each image into ``<|vision_start|>`` + N x ``<|image_pad|>``
+ ``<|vision_end|>``.

The files are written without instantiating the processor: transformers' Qwen2.5-VL processor needs a
video processor, and that needs torchvision, which loading (not building) requires.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.utils.chat_template_utils import render_jinja_template

from sparsectx.data.prompt import build_messages
from sparsectx.io import atomic_write_bytes

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
# Whole tokens, but not "special": decoding with skip_special_tokens=True keeps them (as Qwen3 does).
TAG_TOKENS = ("<think>", "</think>", "<answer>", "</answer>")
IMAGE_TOKEN, VIDEO_TOKEN = "<|image_pad|>", "<|video_pad|>"
EOS_TOKEN, PAD_TOKEN = "<|im_end|>", "<|endoftext|>"
PROCESSOR_CLASS = "Qwen2_5_VLProcessor"

# Qwen-style ChatML. An image part becomes one <|image_pad|> and a video part one <|video_pad|>, which the
# processor expands into the visual input's tokens (Qwen2.5-VL's own template renders both the same way).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}\n"
    "<|im_start|>{{ message['role'] }}{{ '\\n' }}\n"
    "{%- if message['content'] is string -%}{{ message['content'] }}\n"
    "{%- else -%}{%- for part in message['content'] -%}\n"
    "{%- if part['type'] == 'image' -%}<|vision_start|><|image_pad|><|vision_end|>\n"
    "{%- elif part['type'] == 'video' -%}<|vision_start|><|video_pad|><|vision_end|>\n"
    "{%- elif part['type'] == 'text' -%}{{ part['text'] }}{%- endif -%}\n"
    "{%- endfor -%}{%- endif -%}<|im_end|>{{ '\\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}<|im_start|>assistant{{ '\\n' }}{%- endif -%}\n"
)

_CAPITAL_RUN = r"[A-Z](?=[A-Z])|(?<=[A-Z])[A-Z]"
_ADDED = re.compile("|".join(re.escape(token) for token in (*SPECIAL_TOKENS, *TAG_TOKENS)))


@dataclass
class ProcessorConfig:
    write: bool
    """Build and save the tokenizer/processor folder."""
    out_dir: str
    """Target folder (the shipped model's is src/sparsectx/assets/tiny-vlm)."""
    vocab_size: int
    """Total tokens including the 7 special and 4 tag tokens (<= 1024 for the tiny model)."""
    min_frequency: int
    """A merge needs this many occurrences in the corpus."""
    corpus_per_family: int
    """Generated items per task family in the tokenizer's training corpus."""
    patch_size: int
    """Vision patch side in pixels (14 for Qwen2.5-VL)."""
    merge_size: int
    """Patches merged per side into one LLM token (2 for Qwen2.5-VL)."""
    temporal_patch_size: int
    """Frames per temporal patch (2; a still image is repeated)."""

    def __post_init__(self) -> None:
        floor = 256 + len(SPECIAL_TOKENS) + len(TAG_TOKENS)
        if not floor < self.vocab_size <= 1024:
            raise ValueError(f"processor.vocab_size={self.vocab_size} must be in ({floor}, 1024]: bytes + added tokens")
        if self.min_frequency < 1 or self.corpus_per_family < 1:
            raise ValueError("processor.min_frequency and processor.corpus_per_family must be >= 1")


def chat_texts(pairs: Iterable[tuple[str, str]], system: str, instruction: str) -> list[str]:
    """Returns each (question, trace) pair rendered by ``CHAT_TEMPLATE`` as a chat with the trace as reply."""
    texts = []
    for question, trace in pairs:
        messages = [
            *build_messages(question, system, instruction, None),
            {"role": "assistant", "content": trace},
        ]
        rendered, _ = render_jinja_template(conversations=[messages], chat_template=CHAT_TEMPLATE)
        texts.append(rendered[0])
    return texts


def train_tokenizer(texts: Iterable[str], vocab_size: int, min_frequency: int) -> Tokenizer:
    """Returns a byte-level BPE tokenizer of at most ``vocab_size`` tokens trained on ``texts``.

    Ids 0-6 are ``SPECIAL_TOKENS`` and 7-10 ``TAG_TOKENS`` in order. The texts are cut at those tokens
    before training, as encoding cuts them, so no merge spans or imitates them. Every byte is in the
    alphabet, so no text has an unknown token.
    """
    pieces = [piece for text in texts for piece in _ADDED.split(text) if piece]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            # Letters of an all-capitals word (the OCR answers) stay single tokens: no random-bigram merges.
            pre_tokenizers.Split(Regex(_CAPITAL_RUN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[*SPECIAL_TOKENS, *TAG_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(pieces, trainer=trainer)
    state = json.loads(tokenizer.to_str())
    for entry in state["added_tokens"]:
        entry["special"] = entry["content"] in SPECIAL_TOKENS
    return Tokenizer.from_str(json.dumps(state))


def _image_processor(image_size: int, patch_size: int, merge_size: int, temporal_patch_size: int) -> dict:
    pixels = image_size * image_size  # min = max: a square image of this size is never resized
    processor = Qwen2VLImageProcessorPil(
        size={"shortest_edge": pixels, "longest_edge": pixels},
        patch_size=patch_size,
        merge_size=merge_size,
        temporal_patch_size=temporal_patch_size,
    )
    return processor.to_dict()


def processor_files(
    tokenizer: Tokenizer, image_size: int, patch_size: int, merge_size: int, temporal_patch_size: int
) -> dict[str, bytes]:
    """Returns file name -> bytes of the hub-layout processor folder (no file is written)."""
    if image_size % (patch_size * merge_size):
        raise ValueError(
            f"image_size={image_size} must be a multiple of patch_size*merge_size={patch_size * merge_size}"
        )
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN)
    with tempfile.TemporaryDirectory() as scratch:
        wrapped.save_pretrained(scratch)
        files = {path.name: path.read_bytes() for path in sorted(Path(scratch).iterdir()) if path.is_file()}
    image = _image_processor(image_size, patch_size, merge_size, temporal_patch_size)
    video = {  # only the fields that differ from Qwen2VLVideoProcessor's own; never used (no videos)
        "video_processor_type": "Qwen2VLVideoProcessor",
        "patch_size": patch_size,
        "merge_size": merge_size,
        "temporal_patch_size": temporal_patch_size,
    }
    processor = {"processor_class": PROCESSOR_CLASS, "image_processor": image, "video_processor": video}
    files["processor_config.json"] = (json.dumps(processor, indent=2, sort_keys=True) + "\n").encode()
    files["chat_template.jinja"] = CHAT_TEMPLATE.encode()
    return files


def build_processor(
    out_dir: Path,
    texts: Iterable[str],
    vocab_size: int,
    min_frequency: int,
    image_size: int,
    patch_size: int,
    merge_size: int,
    temporal_patch_size: int,
) -> Tokenizer:
    """Returns the trained tokenizer after writing the processor folder ``out_dir`` (each file atomically).

    Other files already in ``out_dir`` (the model's config and weights) are left alone.

    Args:
        out_dir: target folder, created if needed.
        texts: the training corpus, e.g. ``chat_texts(corpus_pairs(cfg, n), system, instruction)``.
        vocab_size: total vocabulary including special and tag tokens.
        min_frequency: minimum corpus count of a merge.
        image_size: side of the square images; the processor keeps it (min_pixels = max_pixels = side^2).
        patch_size, merge_size, temporal_patch_size: Qwen2.5-VL vision geometry.
    """
    tokenizer = train_tokenizer(texts, vocab_size, min_frequency)
    for name, data in processor_files(tokenizer, image_size, patch_size, merge_size, temporal_patch_size).items():
        atomic_write_bytes(Path(out_dir) / name, data)
    return tokenizer


def image_token_count(image_size: int, patch_size: int, merge_size: int) -> int:
    """Returns N, the ``<|image_pad|>`` tokens of one square image: (side / patch / merge)^2."""
    return (image_size // (patch_size * merge_size)) ** 2
