"""Encode once: prompt ids, unpruned M-RoPE positions and per-image visual tokens for each sample.

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
        prompt_ids: (L,) int64 unpruned prompt ids (N_i image-pad tokens per image), no padding.
        positions: (3, L) int64 unpruned positions of the prompt (M-RoPE (t, h, w), or a 1-D family's
            position in all three rows; ``adapter.prompt_positions``).
        images: the prompt's images in order, post-merger.
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
    adapter: VLMAdapter, processor: ImageTextProcessor, items: list[PromptItem], batch: BatchFeature | None = None
) -> list[EncodedSample]:
    """Returns the encoded samples of ``items``; the vision tower runs once for the whole batch.

    ``batch`` is ``processor_inputs(processor, items)`` when the caller already built it (training prefetches
    it on a CPU thread); pinned pixel values are copied to the device asynchronously.
    """
    if batch is None:
        batch = processor_inputs(processor, items)
    device = adapter.model.device
    images: list[ImageTokens] = []
    if "pixel_values" in batch:
        pixels = batch["pixel_values"]
        pixels = pixels.to(device, non_blocking=pixels.is_pinned())
        images = adapter.encode_images(pixels, batch["image_grid_thw"].to(device))
    samples, cursor = [], 0
    for row, item in enumerate(items):
        ids = batch["input_ids"][row][batch["attention_mask"][row].bool()]
        own = images[cursor : cursor + len(item.images)]
        cursor += len(item.images)
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
