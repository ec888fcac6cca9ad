"""What the benchmark scripts share: the real architectures (random weights) and a timing helper.

The published configs of the models the seeds train are written out here, so a benchmark builds the real
architecture with no hub access; cost does not depend on weight values. ``--config DIR`` in each script
reads a local ``config.json`` instead.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoConfig, PretrainedConfig
from transformers.models.qwen2_5_vl import Qwen2_5_VLConfig
from transformers.models.qwen3_vl import Qwen3VLConfig

# Qwen/Qwen2.5-VL-7B-Instruct's config.json (the dimensions that set the cost).
QWEN2_5_VL_7B = {
    "text_config": {
        "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
        "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 128000,
        "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]},
    },
    "vision_config": {
        "depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "patch_size": 14,
        "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31], "out_hidden_size": 3584,
        "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3, "hidden_act": "silu",
        "tokens_per_second": 2,
    },
    "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
    "vision_end_token_id": 151653, "tie_word_embeddings": False,
}  # fmt: skip

# Qwen/Qwen3-VL-4B-Instruct's config.json (the dimensions that set the cost).
QWEN3_VL_4B = {
    "text_config": {
        "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [24, 20, 20],
                            "mrope_interleaved": True},
    },
    "vision_config": {
        "depth": 24, "hidden_size": 1024, "intermediate_size": 4096, "num_heads": 16, "patch_size": 16,
        "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3, "out_hidden_size": 2560,
        "num_position_embeddings": 2304, "deepstack_visual_indexes": [5, 11, 17], "hidden_act": "gelu_pytorch_tanh",
    },
    "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
    "vision_end_token_id": 151653, "tie_word_embeddings": True,
}  # fmt: skip

ARCHITECTURES = {
    "qwen2_5_vl_7b": (Qwen2_5_VLConfig, QWEN2_5_VL_7B),
    "qwen3_vl_4b": (Qwen3VLConfig, QWEN3_VL_4B),
}
SPECIAL_TOKENS = {
    "image_token_id": "<|image_pad|>",
    "video_token_id": "<|video_pad|>",
    "vision_start_token_id": "<|vision_start|>",
    "vision_end_token_id": "<|vision_end|>",
}


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
        for key, token in SPECIAL_TOKENS.items():
            setattr(config, key, tokenizer.convert_tokens_to_ids(token))
        text = config.get_text_config()
        text.eos_token_id, text.pad_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    return config


def median_seconds(fn: Callable[[], object], device: torch.device, warmup: int, repeats: int) -> float:
    """Returns the median wall time of ``fn`` over ``repeats`` runs after ``warmup`` untimed ones (synced)."""
    times = []
    for index in range(warmup + repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if index >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)
