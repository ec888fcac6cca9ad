"""Which model an evaluation loads (the config's, a trained checkpoint, or random weights) and its provenance.

A results leaf records where its weights came from (``load_eval_model``'s info: path, revision, the folder read,
its identity — a hub snapshot's commit or a cheap fingerprint of the directory — and whether the weights were
random), so a stale, retrained or upstream-updated checkpoint is never trusted silently; cost measurements may
run on random weights of the real architecture.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForImageTextToText

from sparsectx.checkpoints import verify_checkpoint
from sparsectx.models import LoadedModel, ModelConfig, adapter_for, load_model, route_vision_tower
from sparsectx.models.loading import DTYPES, check_device, resolve_checkpoint, snapshot_identity
from sparsectx.models.processor import checkpoint_family, load_processor
from sparsectx.models.templates import ChatTemplating

WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "*.bin", "*.bin.index.json", "*.pt")


def has_weights(directory: Path) -> bool:
    """Returns whether a model directory holds weight files (safetensors, bin or pt, sharded or not)."""
    return any(next(directory.glob(pattern), None) is not None for pattern in WEIGHT_PATTERNS)


def weights_folder(model: ModelConfig, checkpoint: str | None) -> str:
    """Returns the local folder an evaluation reads its weights from: ``checkpoint`` (a trained model
    directory), else ``model.path`` at ``model.revision`` (``loading.resolve_checkpoint``).

    Raises:
        FileNotFoundError: the folder or the hub snapshot is not at hand (naming the download command).
    """
    return resolve_checkpoint(replace(model, path=checkpoint) if checkpoint is not None else model)


def load_eval_model(model: ModelConfig, checkpoint: str | None, seed: int) -> tuple[LoadedModel, dict]:
    """Returns the model to evaluate and its provenance (name, path, checkpoint, fingerprint, random weights).

    ``checkpoint`` (a trained model directory) replaces ``model.path``. A local directory with
    ``config.json`` and processor files but no weights is built with random weights from that config
    (``torch.manual_seed(seed)``), directly on ``model.device``: costs measured on it are those of the real
    architecture, since they do not depend on weight values. Its scores are meaningless, and flagged.
    """
    cfg = replace(model, path=checkpoint) if checkpoint is not None else model
    source = weights_folder(model, checkpoint)
    local = Path(source)
    check_device(cfg.device)
    verify_checkpoint(local)  # a trained checkpoint's weights against their recorded sha256
    if not has_weights(local):
        torch.manual_seed(seed)
        config = AutoConfig.from_pretrained(source)
        with torch.device(cfg.device):
            hf = AutoModelForImageTextToText.from_config(
                config, dtype=DTYPES[cfg.dtype], attn_implementation=cfg.attn_implementation
            )
        hf.eval()
        route_vision_tower(hf, cfg)
        processor = load_processor(source, cfg.image_workers, cfg.max_visual_tokens, cfg.thinking, cfg.answer_prefix)
        loaded = LoadedModel(adapter=adapter_for(hf, cfg.signal_chunk), processor=processor)
    else:
        loaded = load_model(replace(cfg, path=source))  # the folder resolved above, not a second resolution
    return loaded, eval_model_info(model, checkpoint, loaded.processor)


def eval_model_info(model: ModelConfig, checkpoint: str | None, processor: ChatTemplating | None = None) -> dict:
    """Returns the provenance of the model an evaluation uses (name, path, revision, the folder read and its
    identity, checkpoint, random weights, dtype, device, attention, family, the effective thinking setting, what
    the generation prompt opens and the answer prefix pre-filled after it), from its files alone: a merge of
    data-parallel shards records what the shards loaded without loading it again; ``processor`` is the loaded
    model's, else the checkpoint's tokenizer and template are read."""
    cfg = replace(model, path=checkpoint) if checkpoint is not None else model
    source = weights_folder(model, checkpoint)
    local = Path(source)
    if processor is None:
        processor = load_processor(source, 1, cfg.max_visual_tokens, cfg.thinking, cfg.answer_prefix)
    return {
        "thinking": processor.thinking,
        "generation_prefix": processor.generation_prefix,
        "answer_prefix": processor.answer_prefix,
        "name": cfg.name,
        "path": cfg.path,
        "revision": cfg.revision,
        "resolved_path": source,
        "checkpoint": checkpoint,
        "checkpoint_id": snapshot_identity(local),
        "random_weights": not has_weights(local),
        "dtype": cfg.dtype,
        "device": cfg.device,
        "attn_implementation": cfg.attn_implementation,
        "vision_attention": cfg.vision_attention,
        "family": checkpoint_family(source),
    }
