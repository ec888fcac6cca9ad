"""Times the Qwen2.5-VL-7B vision tower per image, HF's attention against the grouped one; asserts nothing.

    python scripts/bench_vision.py            # CUDA, bf16, random 7B-architecture weights, 1008x1008 images
    python scripts/bench_vision.py --tiny     # CPU smoke run: tiny dimensions, fp32
    python scripts/bench_vision.py --config /models/Qwen2.5-VL-7B-Instruct   # vision dims from its config.json

For each batch size it prints the median ms per image of: the bare tower under HF's sdpa (one attention
call per window or image) and under ``model.vision_attention: grouped`` (one call per distinct segment
length), ``aligned`` (grouped, with the MLP width zero-padded to ``model.vision_mlp_multiple``) and
``compiled`` (aligned, every block through ``torch.compile``: ``model.compile_blocks``, the presets'
default on CUDA), then each with the adapter's pruner signals (``encode_images``: recomputed in a second
pass under HF, taken from the signal block's own softmax otherwise), and the largest difference between
each ``encode_images`` result and HF's. Dtype, device and signal chunk come from ``conf/model``'s
``qwen2_5_vl_7b.yaml`` (``tiny.yaml`` with ``--tiny``). Weights are random: the cost does not depend on
their values. The language model is a one-layer stub, since only the tower runs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from omegaconf import OmegaConf
from transformers import AutoConfig, AutoModelForImageTextToText
from transformers.models.qwen2_5_vl import Qwen2_5_VLConfig
from transformers.vision_utils import get_vision_window_index

from sparsectx.models import adapter_for, set_vision_attention
from sparsectx.models.compiled_blocks import compile_blocks
from sparsectx.models.loading import DTYPES
from sparsectx.models.vision_attention import group_segments
from sparsectx.models.vision_mlp import align_vision_mlps

CONF = Path(__file__).resolve().parents[1] / "conf" / "model"
# Qwen/Qwen2.5-VL-7B-Instruct's published vision_config (config.json).
VISION_7B = {
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
}
VISION_TINY = {
    "depth": 4,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_heads": 2,
    "patch_size": 14,
    "window_size": 56,
    "fullatt_block_indexes": [1, 3],
    "out_hidden_size": 64,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
}
# The real vocabulary size keeps the config's special-token ids valid; everything else is minimal.
TEXT_STUB = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
}


def parse_args() -> argparse.Namespace:
    """Returns the command line; the defaults are the measurement of ``shared/specs/engine.md``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="tiny dimensions on CPU (conf/model/tiny.yaml)")
    parser.add_argument("--config", help="a model directory whose config.json gives the vision dimensions")
    parser.add_argument("--image-size", type=int, help="square image side in pixels (default 1008; 224 with --tiny)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", help="images per call (default 1 32; 1 4 with --tiny)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls before timing")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls; the median is printed")
    return parser.parse_args()


def build_model(args: argparse.Namespace, dtype: torch.dtype, device: str) -> torch.nn.Module:
    """Returns a random-weight Qwen2.5-VL (eval) with the chosen vision dimensions and a one-layer text stub."""
    if args.config is not None:
        vision = AutoConfig.from_pretrained(args.config).vision_config.to_dict()
    else:
        vision = VISION_TINY if args.tiny else VISION_7B
    config = Qwen2_5_VLConfig(vision_config=vision, text_config=TEXT_STUB)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForImageTextToText.from_config(config, dtype=dtype, attn_implementation="sdpa")
    return model.eval()


def median_ms(call: Callable[[], object], device: str, warmup: int, repeats: int) -> float:
    """Returns the median wall time of ``call`` in ms, synchronising the GPU around each timed call."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def route(model: torch.nn.Module, choice: str, multiple: int) -> None:
    """Puts the vision tower on HF's sdpa (``hf``), on the grouped attention (``grouped``), or on the grouped
    attention with the MLP width padded to ``multiple`` (``aligned``), and that with the blocks compiled
    (``compiled``: the model presets' default on CUDA)."""
    align_vision_mlps(model, multiple if choice in ("aligned", "compiled") else 0)
    compile_blocks(model, choice == "compiled")
    if choice == "hf":
        model.set_attn_implementation({"vision_config": "sdpa"})
    else:
        set_vision_attention(model, "grouped")


def time_batch(model: torch.nn.Module, cfg, batch: int, side: int, args: argparse.Namespace) -> None:
    """Prints the timings per routing and the differences to hf for ``batch`` random images of ``side`` px."""
    chunk = cfg.signal_chunk
    vc, device = model.config.vision_config, str(model.device)
    visual, adapter = model.model.visual, adapter_for(model, chunk)
    grid_side = side // vc.patch_size
    grid = torch.tensor([[1, grid_side, grid_side]] * batch, device=device)
    channels = 3 * vc.temporal_patch_size * vc.patch_size**2
    pixels = torch.randn(batch * grid_side**2, channels, device=device, dtype=model.dtype)
    _, cu = get_vision_window_index(grid, vc.spatial_merge_size, vc.window_size, vc.patch_size)
    lengths = group_segments(cu, int(cu[-1]), None).lengths
    print(f"batch {batch:3d}: {cu.numel() - 1} windows per windowed block, lengths {lengths}")
    encoded = {}
    for choice in ("hf", "grouped", "aligned", "compiled"):
        route(model, choice, cfg.vision_mlp_multiple)
        bare = median_ms(lambda: visual(pixels, grid_thw=grid), device, args.warmup, args.repeats)
        signals = median_ms(lambda: adapter.encode_images(pixels, grid), device, args.warmup, args.repeats)
        encoded[choice] = adapter.encode_images(pixels, grid)
        print(f"  {choice:8s} tower {bare / batch:9.2f} ms/image   with signals {signals / batch:9.2f} ms/image")
    for choice in ("grouped", "aligned", "compiled"):
        for name in ("embeds", "attention_received", "keys"):
            got, want = (torch.cat([getattr(im, name).float() for im in encoded[c]]) for c in (choice, "hf"))
            print(f"  max |{choice} - hf| {name:18s} {(got - want).abs().max().item():.2e}")


@torch.no_grad()
def main() -> None:
    """Prints the timings for every batch size."""
    args = parse_args()
    cfg = OmegaConf.load(CONF / ("tiny.yaml" if args.tiny else "qwen2_5_vl_7b.yaml"))
    side = args.image_size or (224 if args.tiny else 1008)
    model = build_model(args, DTYPES[cfg.dtype], cfg.device)
    vc = model.config.vision_config
    merged = (side // vc.patch_size // vc.spatial_merge_size) ** 2
    print(
        f"{'tiny' if args.tiny else 'Qwen2.5-VL-7B'} vision tower ({vc.depth} blocks, hidden {vc.hidden_size}), "
        f"{cfg.dtype} on {cfg.device}, {side}x{side} images = {merged} merged tokens, "
        f"signal_chunk {cfg.signal_chunk}, median of {args.repeats} after {args.warmup} warmup"
    )
    for batch in args.batch_sizes or ([1, 4] if args.tiny else [1, 32]):
        time_batch(model, cfg, batch, side, args)
    if cfg.device.startswith("cuda"):
        print(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")


if __name__ == "__main__":
    main()
