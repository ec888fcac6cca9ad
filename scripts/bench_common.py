"""What the benchmark scripts share: the real architectures (random weights), timing, and counting what a call
generated (every rate is counted tokens over the time of the same run).

The published configs of the models the seeds train are written out here, so a benchmark builds the real
architecture with no hub access; cost does not depend on weight values. ``--config DIR`` in each script
reads a local ``config.json`` instead.
"""

from __future__ import annotations

import gc
import io
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch
import transformers
from omegaconf import OmegaConf
from PIL import Image
from transformers import AutoConfig, AutoModelForImageTextToText, PretrainedConfig
from transformers.models.glm46v import Glm46VConfig
from transformers.models.qwen2_5_vl import Qwen2_5_VLConfig
from transformers.models.qwen3_5 import Qwen3_5Config
from transformers.models.qwen3_vl import Qwen3VLConfig

from sparsectx.data import Item
from sparsectx.generation import Generation
from sparsectx.models import LoadedModel, adapter_for, resolve_model_path
from sparsectx.models.compiled_blocks import compile_blocks, compile_on
from sparsectx.models.loading import set_vision_attention
from sparsectx.models.processor import ImageTextProcessor, load_processor
from sparsectx.models.vision_mlp import align_vision_mlps

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")

# Qwen/Qwen2.5-VL-7B-Instruct's config.json (the dimensions that set the cost).
QWEN2_5_VL_7B = {
    "text_config": {
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "max_position_embeddings": 128000,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]},
    },
    "vision_config": {
        "depth": 32,
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "patch_size": 14,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "out_hidden_size": 3584,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "in_channels": 3,
        "hidden_act": "silu",
        "tokens_per_second": 2,
    },
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "tie_word_embeddings": False,
}

# Qwen/Qwen3-VL-4B-Instruct's config.json (the dimensions that set the cost).
QWEN3_VL_4B = {
    "text_config": {
        "hidden_size": 2560,
        "intermediate_size": 9728,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "tie_word_embeddings": True,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 5000000.0,
            "mrope_section": [24, 20, 20],
            "mrope_interleaved": True,
        },
    },
    "vision_config": {
        "depth": 24,
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_heads": 16,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "in_channels": 3,
        "out_hidden_size": 2560,
        "num_position_embeddings": 2304,
        "deepstack_visual_indexes": [5, 11, 17],
        "hidden_act": "gelu_pytorch_tanh",
    },
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "tie_word_embeddings": True,
}

# Qwen/Qwen3.5-4B, as conf/model/qwen3_5_4b.yaml states it: hidden 2560, 32 hybrid layers (every fourth full
# attention, 16 query / 4 KV heads of 256, a gated q_proj), vocabulary 248,320, tied embeddings. UNVERIFIED here
# (the checkpoint's config.json could not be read from this machine): the MLP width 9216, the linear-attention
# heads (transformers' Qwen3_5TextConfig defaults: 16 key / 32 value heads of 128, kernel 4), the rotary
# sections and the vision tower (taken as Qwen3-VL-4B's: depth 24, width 1024, out 2560, no DeepStack).
QWEN3_5_4B = {
    "text_config": {
        "hidden_size": 2560,
        "intermediate_size": 9216,
        "num_hidden_layers": 32,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "vocab_size": 248320,
        "max_position_embeddings": 262144,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000000.0,
            "mrope_section": [11, 11, 10],
            "mrope_interleaved": True,
            "partial_rotary_factor": 0.25,
        },
    },
    "vision_config": {
        "depth": 24,
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_heads": 16,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "in_channels": 3,
        "out_hidden_size": 2560,
        "num_position_embeddings": 2304,
        "hidden_act": "gelu_pytorch_tanh",
    },
    "tie_word_embeddings": True,
}

# Qwen3.5-9B, as conf/model/qwen3_5_9b.yaml states it: transformers 5.17's Qwen3_5TextConfig defaults, which it
# documents as the 9B style (width 4096, MLP 12288, 32 hybrid layers, 16 query / 4 KV heads of 256, linear
# attention 16 key / 32 value heads of 128, kernel 4, untied head). UNVERIFIED (the checkpoint's config.json
# could not be read from this machine): the vision tower, taken as Qwen3_5VisionConfig's defaults (depth 27,
# width 1152, MLP 4304) with its output at the decoder's width, and the rotary sections (the 4B's).
QWEN3_5_9B = {
    "text_config": {
        **QWEN3_5_4B["text_config"],
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "tie_word_embeddings": False,
    },
    "vision_config": {
        **QWEN3_5_4B["vision_config"],
        "depth": 27,
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "out_hidden_size": 4096,
    },
    "tie_word_embeddings": False,
}

# zai-org/GLM-4.6V-Flash: src/sparsectx/assets/published/GLM-4.6V-Flash/config.json (its sources: SOURCES.md there):
# vision depth 24, width 1536, 12 heads, MLP 13696, image size 336, out 4096, patch 14, merge 2; a 40-layer
# GLM-4 decoder, width 4096, MLP 13696, 32 heads, 2 KV heads, vocabulary 151,552, partial rotary 0.5, M-RoPE
# sections [8, 12, 12], context 131,072 (the model card's 128K; this file said 65,536, GLM-4.1V's). rope_theta
# 10000 is UNVERIFIED: no copy of the checkpoint's own config.json was readable here (GLM-4.1V's is 10000).
# The published config.json declares glm4v (Glm4vForConditionalGeneration); Glm46VConfig builds the same model.
GLM46V_9B = {
    "text_config": {
        "hidden_size": 4096,
        "intermediate_size": 13696,
        "num_hidden_layers": 40,
        "num_attention_heads": 32,
        "num_key_value_heads": 2,
        "vocab_size": 151552,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "attention_bias": True,
        "tie_word_embeddings": False,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [8, 12, 12],
            "partial_rotary_factor": 0.5,
        },
    },
    "vision_config": {
        "depth": 24,
        "hidden_size": 1536,
        "intermediate_size": 13696,
        "num_heads": 12,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "in_channels": 3,
        "out_hidden_size": 4096,
        "image_size": 336,
        "hidden_act": "silu",
    },
    "tie_word_embeddings": False,
}

ARCHITECTURES = {
    "qwen2_5_vl_7b": (Qwen2_5_VLConfig, QWEN2_5_VL_7B),
    "qwen3_vl_4b": (Qwen3VLConfig, QWEN3_VL_4B),
    "qwen3_5_4b": (Qwen3_5Config, QWEN3_5_4B),
    "qwen3_5_9b": (Qwen3_5Config, QWEN3_5_9B),
    "glm46v_9b": (Glm46VConfig, GLM46V_9B),
}
QWEN_TOKENS = {
    "image_token_id": "<|image_pad|>",
    "video_token_id": "<|video_pad|>",
    "vision_start_token_id": "<|vision_start|>",
    "vision_end_token_id": "<|vision_end|>",
}
GLM_TOKENS = {
    "image_token_id": "<|image|>",
    "video_token_id": "<|video|>",
    "image_start_token_id": "<|begin_of_image|>",
    "image_end_token_id": "<|end_of_image|>",
    "video_start_token_id": "<|begin_of_video|>",
    "video_end_token_id": "<|end_of_video|>",
}
SPECIAL_TOKENS = {"glm46v_9b": GLM_TOKENS}
"""Config keys of each architecture's special tokens, by token; Qwen's unless listed."""


def architecture(config_dir: str | None, arch: str = "qwen2_5_vl_7b", tokenizer=None) -> PretrainedConfig:
    """Returns the config of ``arch`` (``ARCHITECTURES``), or the one in ``config_dir``'s config.json.

    With ``tokenizer`` (the shipped tiny model's, for benchmarks that run the project's prompts), the special
    token ids are that tokenizer's, so its prompts place image tokens where the model looks for them.
    """
    if config_dir is not None:
        config = AutoConfig.from_pretrained(Path(config_dir))
    else:
        cls, values = ARCHITECTURES[arch]
        config = cls(**values)
    if tokenizer is not None:
        for key, token in SPECIAL_TOKENS.get(arch, QWEN_TOKENS).items():
            setattr(config, key, tokenizer.convert_tokens_to_ids(token))
        text = config.get_text_config()
        text.eos_token_id, text.pad_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    return config


def bench_processor(arch: str, workers: int, scratch: Path) -> ImageTextProcessor:
    """Returns a processor whose prompts the architecture's model reads: the shipped tiny model's for the Qwen
    families; for GLM-4.6V the tests' character tokenizer with GLM's special tokens and chat template and
    GLM's own image processor (``tests/family_models.py``), saved in ``scratch``."""
    if arch != "glm46v_9b":
        return load_processor(resolve_model_path("package:tiny-vlm"), workers)
    sys.path.insert(0, str(ROOT / "tests"))
    from family_models import glm_processor_dir

    glm_processor_dir(scratch)
    return load_processor(scratch, workers)


def real_model(
    arch: str, config_dir: str | None, visual_tokens: int, compile_mode: str | None, scratch: Path
) -> tuple[LoadedModel, int]:
    """Returns the real architecture with random bf16 weights on CUDA, as the model preset configures it
    (grouped vision attention, padded vision MLP, compiled blocks), and the square image side in pixels that
    gives ``visual_tokens`` merged tokens."""
    preset = OmegaConf.load(ROOT / "conf/model" / f"{arch}.yaml")
    processor = bench_processor(arch, preset.image_workers, scratch)
    config = architecture(config_dir, arch, processor.tokenizer)
    if arch in SPECIAL_TOKENS:  # the processor recognises GLM's prompt format from the saved config.json
        config.save_pretrained(scratch)
        processor = load_processor(scratch, preset.image_workers)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    vision = model.config.vision_config
    side = vision.patch_size * vision.spatial_merge_size * round(visual_tokens**0.5)
    image_processor = processor.image_processor
    image_processor.patch_size = vision.patch_size
    # GLM's resize bounds count the pixels of both temporal copies of an image (its smart_resize: t x h x w).
    pixels = side * side * (vision.temporal_patch_size if arch == "glm46v_9b" else 1)
    image_processor.size = {"shortest_edge": pixels, "longest_edge": pixels}
    model.eval()
    set_vision_attention(model, "grouped")
    align_vision_mlps(model, preset.vision_mlp_multiple)
    compile_blocks(model, compile_on(compile_mode or preset.compile_blocks, model.device))
    return LoadedModel(adapter_for(model, signal_chunk=preset.signal_chunk), processor), side


def noise_items(count: int, side: int, seed: int) -> list[Item]:
    """Returns ``count`` training items with random ``side`` x ``side`` images and a short reference trace."""
    generator = torch.Generator().manual_seed(seed)
    items = []
    for index in range(count):
        pixels = torch.randint(0, 256, (side, side, 3), generator=generator, dtype=torch.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels.numpy()).save(buffer, format="PNG")
        items.append(
            Item(
                index,
                buffer.getvalue(),
                "How many circles are in the image?",
                {},
                "3",
                "",
                "count",
                "",
                "<think>I count three circles.</think><answer>3</answer>",
                "",
                {},
            )
        )
    return items


def timed_runs(fn: Callable[[], object], device: torch.device, warmup: int, repeats: int) -> list[tuple[float, object]]:
    """Returns (wall seconds, what ``fn`` returned) of ``repeats`` runs after ``warmup`` untimed ones (synced), so a
    rate is the tokens of a run over that same run's time."""
    runs = []
    for index in range(warmup + repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        result = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if index >= warmup:
            runs.append((time.perf_counter() - start, result))
    return runs


def median_run(runs: list[tuple[float, object]]) -> tuple[float, object]:
    """Returns the run of median time (the slower middle one of an even count) and what it returned."""
    return sorted(runs, key=lambda run: run[0])[len(runs) // 2]


@dataclass
class GeneratedLengths:
    """The tokens each sequence of one call generated, counted from the sequences the call returned."""

    lengths: list[int]

    @property
    def tokens(self) -> int:
        """Returns the tokens generated over every sequence."""
        return sum(self.lengths)

    def summary(self) -> dict[str, float]:
        """Returns min / median / p90 (nearest rank) / max tokens per sequence: what shows an early stop."""
        ordered = sorted(self.lengths)
        if not ordered:
            return {}
        p90 = ordered[math.ceil(0.9 * len(ordered)) - 1]
        return {"min": ordered[0], "median": statistics.median(ordered), "p90": p90, "max": ordered[-1]}

    def text(self) -> str:
        """Returns the summary as one table cell, ``min / median / p90 / max``."""
        summary = self.summary()
        return " / ".join(f"{summary[key]:g}" for key in ("min", "median", "p90", "max")) if summary else "none"


def engine_lengths(generations: Sequence[Generation]) -> GeneratedLengths:
    """Returns the lengths of the engine's returned generations (each ends at its end token or stop string,
    which it keeps, or at the cap: ``sparsectx.engine.decode``)."""
    return GeneratedLengths([generation.token_ids.numel() for generation in generations])


def hf_lengths(sequences: torch.Tensor, prompt_length: int, end_ids: Collection[int]) -> list[int]:
    """Returns the tokens each row of HF ``generate``'s (B, prompt + T) output generated after its prompt.

    A row that emitted one of ``end_ids`` (the eos ids ``generate`` was given) ends there, the end id counted:
    transformers 5.17 ``GenerationMixin._sample`` (generation/utils.py) writes ``pad_token_id`` into a finished
    row for the steps the batch still runs. Without ``end_ids`` every one of the T columns was generated.
    """
    new = sequences[:, prompt_length:]
    if not end_ids:
        return [new.shape[1]] * new.shape[0]
    ends = torch.isin(new, torch.tensor(sorted(end_ids), device=new.device))
    first = torch.where(ends.any(dim=1), ends.int().argmax(dim=1) + 1, new.shape[1])
    return first.tolist()


def tokens_per_second(tokens: int, seconds: float) -> float | None:
    """Returns the rate of ``tokens`` generated in ``seconds``; None when nothing was generated."""
    return tokens / seconds if tokens > 0 else None


def rate_text(tokens: int, seconds: float) -> str:
    """Returns the tokens/s cell: the rate, or a note that the call generated no tokens (no rate to print)."""
    rate = tokens_per_second(tokens, seconds)
    return "no tokens generated" if rate is None else f"{rate:.0f}"


def run_facts(device: torch.device) -> dict[str, object]:
    """Returns what a ``--json`` record says about where it ran: device, library versions, commit (and whether
    tracked files differed from it), command."""
    git = lambda *args: subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)  # noqa: E731
    try:
        commit = git("rev-parse", "HEAD").stdout.strip()
        dirty = bool(git("status", "--porcelain", "--untracked-files=no").stdout.strip())
    except (OSError, subprocess.CalledProcessError):  # a copy of the tree without its git directory
        commit, dirty = None, None
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "commit": commit,
        "commit_dirty": dirty,
        "command": " ".join(sys.argv),
    }


def unless_out_of_memory(measure: Callable[[], T]) -> tuple[T | None, str | None]:
    """Returns (``measure()``, None), or (None, the allocator's message) when the GPU ran out of memory
    (``torch.cuda.OutOfMemoryError``): the caller prints ``OOM`` for that cell and goes on with the memory freed,
    so ``measure`` should hold what it allocates (an engine, its caches) in its own frame."""
    try:
        return measure(), None
    except torch.cuda.OutOfMemoryError as error:
        message = str(error).splitlines()[0]
    gc.collect()  # outside the except block: the error's traceback no longer holds the failed call's tensors
    torch.cuda.empty_cache()
    return None, message


def write_json(path: Path, record: dict) -> None:
    """Writes ``record`` to ``path`` whole (a temporary file, then renamed), so a run cut off mid-way leaves the
    rows finished so far, never half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(record, indent=1) + "\n")
    partial.replace(path)
