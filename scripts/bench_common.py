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


def architecture(config_dir: str | None) -> PretrainedConfig:
    """Returns the Qwen2.5-VL-7B config, or the one in ``config_dir``'s config.json when given."""
    if config_dir is not None:
        return AutoConfig.from_pretrained(Path(config_dir))
    return Qwen2_5_VLConfig(**QWEN2_5_VL_7B)


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
