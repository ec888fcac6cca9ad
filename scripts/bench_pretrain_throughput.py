"""Measures where a pretraining step of the tiny VLM spends its time; prints figures, asserts nothing.

    python scripts/bench_pretrain_throughput.py [hydra overrides of conf/pretrain_tiny.yaml]

Reports: items/s of the synthetic stream in one process; items/s the DataLoader delivers with
``train.num_workers`` workers (no model); optimizer steps/s on one fixed batch with HF's per-image
vision attention and with the batched one; and steps/s of the real loop (loader + steps, attention as
``train.batched_vision_attention`` says) end to end.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from transformers import AutoTokenizer
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from sparsectx.pretrain.stream import PretrainStream
from sparsectx.pretrain.train import benchmark_hashes, load_config, make_loader, train_step, training_model


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:8.1f}"


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main(overrides: list[str]) -> None:
    """Prints the four throughput figures for the pretraining config composed with ``overrides``."""
    with initialize_config_dir(config_dir=str(Path(__file__).resolve().parents[1] / "conf"), version_base="1.3"):
        cfg = load_config(compose("pretrain_tiny", overrides=overrides))
    tokenizer = AutoTokenizer.from_pretrained(cfg.out_dir)
    image_proc = Qwen2VLImageProcessorPil.from_pretrained(cfg.out_dir)
    side = cfg.data.scene.image_size // (cfg.vision.patch_size * cfg.vision.spatial_merge_size)
    stream = PretrainStream(cfg.data, tokenizer, (1, side, side), benchmark_hashes(cfg))
    batch_size, device = cfg.train.batch_size, cfg.device
    print(f"batch {batch_size}, workers {cfg.train.num_workers}, device {device}")

    start = time.time()
    for n in range(256):
        stream[n]
    print(f"stream, one process      items/s {_rate(256, time.time() - start)}")

    # Past the prefetched queue (workers x 4 batches), so the figure is the steady-state delivery rate.
    batches = 6 * max(1, cfg.train.num_workers)
    loader = iter(make_loader(cfg, stream, tokenizer.pad_token_id, 0))
    first = next(loader)
    start = time.time()
    for _ in range(batches):
        next(loader)
    rate = _rate(batches * batch_size, time.time() - start)
    print(f"loader, {cfg.train.num_workers:2d} workers       items/s {rate}")
    del loader

    steps = 20
    for batched in (False, True):
        model = training_model(cfg, tokenizer, batched)
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
        for s in range(3):
            train_step(model, optimizer, first, cfg, image_proc, s)
        _sync(device)
        start = time.time()
        for s in range(steps):
            train_step(model, optimizer, first, cfg, image_proc, s)
        _sync(device)
        name = "batched" if batched else "per-image"
        print(f"fixed batch, {name:9s}   steps/s {_rate(steps, time.time() - start)}")

    model = training_model(cfg, tokenizer, cfg.train.batched_vision_attention)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    loader = make_loader(cfg, stream, tokenizer.pad_token_id, 0)
    start, done = time.time(), 0
    for s, batch in enumerate(loader):
        train_step(model, optimizer, batch, cfg, image_proc, s)
        if s == 4:
            _sync(device)
            start = time.time()
        done = s - 4
        if done == 100:
            break
    _sync(device)
    print(f"end to end (loader+step) steps/s {_rate(done, time.time() - start)}")
    if device.startswith("cuda"):
        print(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")


if __name__ == "__main__":
    main(sys.argv[1:])
