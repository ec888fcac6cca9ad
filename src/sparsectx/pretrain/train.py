"""Pretrain the tiny Qwen2.5-VL-class model on the synthetic stream with the full visual context."""

from __future__ import annotations

import functools
import json
import math
import os
import time
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader, Subset
from tqdm import tqdm
from transformers import AutoTokenizer
from transformers.models.qwen2_5_vl import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from sparsectx import config_schema
from sparsectx.checkpoints import load_plain, torch_save
from sparsectx.data.synthetic import generate_bench
from sparsectx.data.video_family import video_items
from sparsectx.io import atomic_write_json
from sparsectx.models.vision_attention import use_grouped_vision_attention
from sparsectx.pretrain.config import PretrainConfig
from sparsectx.pretrain.patchify import patchify, patchify_clips
from sparsectx.pretrain.stream import PretrainStream, VideoStream, collate


def load_config(cfg: DictConfig) -> PretrainConfig:
    """Returns the checked config; unknown, missing or mistyped keys raise, all at once."""
    return config_schema.load_config(PretrainConfig, cfg, "the pretraining config (conf/pretrain_tiny*.yaml)")


def build_model(cfg: PretrainConfig, tokenizer) -> Qwen2_5_VLForConditionalGeneration:
    """Returns a freshly initialised tiny Qwen2.5-VL (seeded by cfg.seed) sized to the tokenizer."""
    torch.manual_seed(cfg.seed)
    get = tokenizer.convert_tokens_to_ids
    config = Qwen2_5_VLConfig(
        vision_config={**vars(cfg.vision), "out_hidden_size": cfg.text.hidden_size},
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": cfg.text.hidden_size,
            "intermediate_size": cfg.text.intermediate_size,
            "num_hidden_layers": cfg.text.num_hidden_layers,
            "num_attention_heads": cfg.text.num_attention_heads,
            "num_key_value_heads": cfg.text.num_key_value_heads,
            "max_position_embeddings": cfg.text.max_position_embeddings,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": cfg.text.rope_theta,
                "mrope_section": cfg.text.mrope_section,
            },
            "bos_token_id": tokenizer.pad_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        image_token_id=get("<|image_pad|>"),
        video_token_id=get("<|video_pad|>"),
        vision_start_token_id=get("<|vision_start|>"),
        vision_end_token_id=get("<|vision_end|>"),
        tie_word_embeddings=True,
    )
    return Qwen2_5_VLForConditionalGeneration(config)


def training_model(cfg: PretrainConfig, tokenizer, batched_vision_attention: bool):
    """Returns a fresh model on ``cfg.device``, its vision tower on the batched attention when asked."""
    model = build_model(cfg, tokenizer).to(cfg.device)
    if batched_vision_attention:
        use_grouped_vision_attention(model)
    return model


def benchmark_hashes(cfg: PretrainConfig) -> set[str]:
    """Returns the content hashes of every benchmark item (and video benchmark clip), which pretraining must
    never see."""
    hashes = set().union(*(generate_bench(cfg.data, bench)[1] for bench in cfg.data.benches))
    if cfg.video is not None:
        hashes |= {item.content_hash() for item in video_items(cfg.data, cfg.video)}
    return hashes


def video_stream(cfg: PretrainConfig, model) -> VideoStream | None:
    """Returns how the stream draws clips for ``model`` (its temporal position step), None without a family."""
    if cfg.video is None:
        return None
    vision = model.config.vision_config
    return VideoStream(
        cfg.video,
        cfg.train.videos_per_batch,
        cfg.train.batch_size,
        int(vision.tokens_per_second),
        cfg.vision.temporal_patch_size,
        cfg.vision.spatial_merge_size,
        cfg.vision.patch_size,
    )


def lr_at(step: int, cfg: PretrainConfig) -> float:
    """Returns the learning rate at ``step``: linear warmup, then cosine decay to 10%."""
    s = cfg.train
    if step < s.warmup_steps:
        return s.lr * (step + 1) / s.warmup_steps
    progress = (step - s.warmup_steps) / max(1, s.steps - s.warmup_steps)
    return s.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def visual_inputs(batch: dict, cfg: PretrainConfig, image_proc, device: str) -> dict[str, torch.Tensor]:
    """Returns the model's pixel inputs for a batch: ``pixel_values``/``image_grid_thw`` for its images and
    ``pixel_values_videos``/``video_grid_thw`` for its clips (each only when the batch has some)."""
    v, out = cfg.vision, {}
    norm = (
        image_proc.image_mean,
        image_proc.image_std,
        v.patch_size,
        v.spatial_merge_size,
        v.temporal_patch_size,
    )
    if batch["images"] is not None:
        out["pixel_values"], out["image_grid_thw"] = patchify(batch["images"].to(device, non_blocking=True), *norm)
    if batch["clips"] is not None:
        clips = batch["clips"].to(device, non_blocking=True)
        out["pixel_values_videos"], out["video_grid_thw"] = patchify_clips(clips, *norm)
    return out


def _loss(model, batch: dict[str, torch.Tensor], cfg: PretrainConfig, image_proc, device: str) -> torch.Tensor:
    ids = batch["input_ids"].to(device)
    with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=cfg.train.bf16):
        logits = model(
            input_ids=ids,
            attention_mask=batch["attention_mask"].to(device),
            position_ids=batch["position_ids"].to(device),
            **visual_inputs(batch, cfg, image_proc, device),
        ).logits
    labels = batch["labels"].to(device)
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
    )


def run(raw: DictConfig, command: str = "python src/pretrain_tiny.py") -> dict:
    """Trains until ``train.steps`` or ``train.time_limit_s``; returns {step, done, curve}. Resumes from state_dir.

    ``command`` is the call recorded in the training record (the script passes its own command line).
    """
    cfg = load_config(raw)
    torch.set_num_threads(cfg.train.main_threads)
    out, state_dir = Path(cfg.out_dir), Path(cfg.state_dir)
    tokenizer = AutoTokenizer.from_pretrained(out)
    image_proc = Qwen2VLImageProcessorPil.from_pretrained(out)
    side = cfg.data.scene.image_size // (cfg.vision.patch_size * cfg.vision.spatial_merge_size)
    model = training_model(cfg, tokenizer, cfg.train.batched_vision_attention)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    step, curve, seconds_before, earlier = 0, [], 0.0, None
    if (state_dir / "state.pt").exists():
        state = load_state(state_dir / "state.pt", cfg.device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if "seconds" not in state:
            raise ValueError(
                f"{state_dir / 'state.pt'} has no 'seconds' (written before pretraining summed its time over "
                "calls): move it away to start over, or finish that run with the code that wrote it"
            )
        step, curve, seconds_before = state["step"], state["curve"], state["seconds"]
        earlier = state.get("earlier_stage")
    elif cfg.init_from is not None:
        init = Qwen2_5_VLForConditionalGeneration.from_pretrained(cfg.init_from, dtype=torch.float32)
        model.load_state_dict(init.state_dict())
        earlier = earlier_stage(Path(cfg.init_from))
    stream = PretrainStream(cfg.data, tokenizer, (1, side, side), benchmark_hashes(cfg), video_stream(cfg, model))
    loader = make_loader(cfg, stream, tokenizer.pad_token_id, step)
    start, window = time.time(), []

    def elapsed() -> float:  # loop wall time over every call so far
        return seconds_before + time.time() - start

    model.train()
    bar = tqdm(total=cfg.train.steps, initial=step, desc="pretrain", mininterval=10)
    for batch in loader:
        loss = train_step(model, optimizer, batch, cfg, image_proc, step)
        if not math.isfinite(loss):
            raise FloatingPointError(f"non-finite loss at step {step}; last good state is in {state_dir}")
        step += 1
        window.append(loss)
        bar.update(1)
        if step % cfg.train.log_every == 0:
            curve.append({"step": step, "loss": sum(window) / len(window), "seconds": elapsed()})
            bar.set_postfix(loss=f"{curve[-1]['loss']:.3f}")
            window = []
        out_of_time = time.time() - start > cfg.train.time_limit_s
        if step % cfg.train.save_every == 0 or step == cfg.train.steps or out_of_time:
            _save_state(state_dir, model, optimizer, step, curve, elapsed(), earlier)
        if out_of_time:
            break
    bar.close()
    done = step >= cfg.train.steps
    save_release(model, cfg, out, curve, step, done, elapsed(), command, earlier)
    return {"step": step, "done": done, "curve": curve}


def make_loader(cfg: PretrainConfig, stream: PretrainStream, pad_id: int, start_step: int) -> DataLoader:
    """Returns the batches of steps ``start_step .. train.steps`` in order, built by ``train.num_workers`` workers."""
    # Each worker tokenizes one item at a time; a Rust thread pool per worker only fights the others for cores.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    order = Subset(stream, range(start_step * cfg.train.batch_size, cfg.train.steps * cfg.train.batch_size))
    return DataLoader(
        order,
        batch_size=cfg.train.batch_size,
        num_workers=cfg.train.num_workers,
        collate_fn=functools.partial(collate, pad_id=pad_id),
        pin_memory=cfg.device != "cpu",
        persistent_workers=False,
        prefetch_factor=4 if cfg.train.num_workers else None,
        worker_init_fn=_one_thread,
    )


def train_step(model, optimizer, batch: dict[str, torch.Tensor], cfg: PretrainConfig, image_proc, step: int) -> float:
    """Runs one optimizer step at ``step``'s learning rate; returns the loss (not applied when non-finite)."""
    for group in optimizer.param_groups:
        group["lr"] = lr_at(step, cfg)
    loss = _loss(model, batch, cfg, image_proc, cfg.device)
    value = loss.item()
    if not math.isfinite(value):
        return value
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
    optimizer.step()
    return value


def _one_thread(_worker: int) -> None:
    """Keeps each data worker on one intra-op thread (16 workers x 16 threads starve the main process)."""
    torch.set_num_threads(1)


def earlier_stage(folder: Path) -> dict:
    """Returns the training record of the released model a continuation starts from (kept in its record).

    Raises:
        FileNotFoundError: ``folder`` has no ``training_record.json`` (not a folder this script released).
    """
    path = folder / "training_record.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"init_from={folder}: no training_record.json there; a continuation starts from a folder "
            "src/pretrain_tiny.py released (its record is kept as the new record's earlier_stage)"
        )
    return json.loads(path.read_text())


def load_state(path: Path, device: str) -> dict:
    """Returns the resume state ``_save_state`` wrote, tensors on ``device``, read as plain data (no object in the
    file is built or called: anyone who can write ``state_dir`` could otherwise run code as whoever resumes).

    Raises:
        DamagedFileError: ``path`` holds more than plain data (hostile, or written by an older version) or cannot
            be read, naming it and the fix.
    """
    fix = f"delete {path} to start pretraining over, or restore it from a backup you trust"
    return load_plain(path, device, fix)


def _save_state(
    state_dir: Path, model, optimizer, step: int, curve: list, seconds: float, earlier: dict | None = None
) -> None:
    """Writes ``state_dir/state.pt`` atomically (temporary file, fsync, rename).

    A full disk raises ``OSError`` (errno ENOSPC) naming the file and the space the state needs; the
    half-written copy is removed and the previous ``state.pt`` stays whole, so a rerun resumes from it.
    """
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "step": step,
        "curve": curve,
        "seconds": seconds,
        "earlier_stage": earlier,
    }
    torch_save(state_dir / "state.pt", state, "the previous state.pt, if any, is kept and a rerun resumes from it")


def save_release(
    model,
    cfg: PretrainConfig,
    out: Path,
    curve: list,
    step: int,
    complete: bool,
    train_seconds: float,
    command: str,
    earlier: dict | None = None,
) -> None:
    """Writes the shipped weights (one safetensors file in ``weights_dtype``), config and training record.

    Written at every stop, so a time-limited call still leaves a usable model; ``complete`` records
    whether ``train.steps`` was reached (re-running continues from the resume state). ``train_seconds``
    is the loop's wall time summed over every call so far (the curve's ``seconds`` count the same way),
    the figure the project's GPU-time budget for this script is checked against. A continuation
    (``init_from``) keeps the record of the stage it started from as ``earlier_stage``.
    """
    model.eval()
    model.set_attn_implementation({"vision_config": "sdpa"})
    model.to(getattr(torch, cfg.weights_dtype)).save_pretrained(out, safe_serialization=True)
    record = {
        "command": command,
        "config": OmegaConf.to_container(OmegaConf.structured(cfg)),
        "steps": step,
        "complete": complete,
        "samples_seen": step * cfg.train.batch_size,
        "train_seconds": round(train_seconds, 1),
        "parameters": sum(p.numel() for p in model.parameters()),
        "curve": curve,
    }
    if earlier is not None:
        record["earlier_stage"] = earlier
    atomic_write_json(out / "training_record.json", record)
