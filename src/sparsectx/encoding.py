"""Encode once: prompt ids, unpruned M-RoPE positions and per-image (per-video) visual tokens for each sample.

An ``EncodedSample`` is everything upstream of the pruner. Contexts at any number of budgets (the
student at b, at b + delta, the full-context teacher) are built from it without re-running the
vision tower.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import BatchFeature

from sparsectx.models.adapter import VLMAdapter
from sparsectx.models.positions import rope_positions  # noqa: F401  (re-exported for pretraining's workers)
from sparsectx.models.processor import ImageTextProcessor
from sparsectx.prompting import PromptItem, processor_inputs
from sparsectx.visual import ImageTokens


@dataclass
class EncodedSample:
    """One prompt, encoded once.

    Attributes:
        sample_id: the item's id.
        prompt_ids: (L,) int64 unpruned prompt ids (N_i image-pad tokens per image), no padding. A video's
            pad slots hold the image pad too: every visual slot carries ``adapter.image_token_id``, the one
            marker the context builder, the engine and in-LLM pruning read (the slots' embeddings are the
            visual tokens, never the pad's).
        positions: (3, L) int64 unpruned positions of the prompt (M-RoPE (t, h, w), or a 1-D family's
            position in all three rows; ``adapter.prompt_positions``).
        images: the prompt's visual inputs in order (its videos, then its images), post-merger.
        question_embeds: (T_q, D) LLM input embeddings of the question's tokens.
        next_position: the position of the first response token (max prompt position + 1).
    """

    sample_id: str
    prompt_ids: torch.Tensor
    positions: torch.Tensor
    images: list[ImageTokens]
    question_embeds: torch.Tensor
    next_position: int


@torch.no_grad()
def question_embeddings(adapter: VLMAdapter, processor: ImageTextProcessor, question: str) -> torch.Tensor:
    """Returns (T_q, D) input embeddings of the question text alone (no template, no vision tokens)."""
    ids = processor.tokenizer(question, add_special_tokens=False, return_tensors="pt").input_ids[0]
    device = adapter.model.device
    return adapter.embed_ids(ids.to(device)).float()


def encode_samples(
    adapter: VLMAdapter,
    processor: ImageTextProcessor,
    items: list[PromptItem],
    batch: BatchFeature | None = None,
) -> list[EncodedSample]:
    """Returns the encoded samples of ``items``; the vision tower runs once for the batch's images (and once
    for its videos, when it has any).

    ``batch`` is ``processor_inputs(processor, items)`` when the caller already built it (training prefetches
    it on a CPU thread); pinned pixel values are copied to the device asynchronously.
    """
    if batch is None:
        batch = processor_inputs(processor, items)
    device = adapter.model.device
    videos, images = encode_visual(adapter, batch)
    samples, cursor, video_cursor = [], 0, 0
    for row, item in enumerate(items):
        ids = batch["input_ids"][row][batch["attention_mask"][row].bool()]
        own = videos[video_cursor : video_cursor + len(item.videos)] + images[cursor : cursor + len(item.images)]
        cursor += len(item.images)
        video_cursor += len(item.videos)
        if item.videos:
            ids = torch.where(ids == adapter.video_token_id, adapter.image_token_id, ids)
        positions, next_position = adapter.prompt_positions(ids, own)
        samples.append(
            EncodedSample(
                sample_id=item.sample_id,
                prompt_ids=ids.to(device),
                positions=positions.to(device),
                images=own,
                question_embeds=question_embeddings(adapter, processor, item.question),
                next_position=next_position,
            )
        )
    return samples


def encode_visual(adapter: VLMAdapter, batch: BatchFeature) -> tuple[list[ImageTokens], list[ImageTokens]]:
    """Returns (videos, images) of a processed batch, each kind through the vision tower once, in batch order.

    Pixel values not yet on the model's device are copied there (pinned ones asynchronously).
    """
    device = adapter.model.device
    images: list[ImageTokens] = []
    videos: list[ImageTokens] = []
    if "pixel_values" in batch:
        images = adapter.encode_images(_on(batch["pixel_values"], device), batch["image_grid_thw"].to(device))
    if "pixel_values_videos" in batch:
        seconds = batch.get("second_per_grid_ts")
        grids = batch["video_grid_thw"].to(device)
        videos = adapter.encode_videos(_on(batch["pixel_values_videos"], device), grids, seconds)
    return videos, images


def _on(pixels: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Returns ``pixels`` on ``device``; pinned memory is copied asynchronously."""
    return pixels.to(device, non_blocking=pixels.is_pinned())
