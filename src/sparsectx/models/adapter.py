"""The model-adapter interface: the only place that knows a VLM family's internals.

Everything outside ``sparsectx.models`` talks to a VLM through ``VLMAdapter``: encode images once into
``ImageTokens``, embed text ids, run the language model on prepared input embeddings with explicit
3D positions and a 2D mask, and project hidden states to logits at chosen positions only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from transformers import PreTrainedModel

from sparsectx.visual import ImageTokens, VisionSignals


@dataclass
class LLMInputs:
    """Prepared language-model inputs for a (left-padded) batch.

    Attributes:
        embeds: (B, L, D) input embeddings, visual slots already filled.
        attention_mask: (B, L) 1 for real tokens, 0 for padding; or a dict of ready 4D masks keyed by
            layer type (used by the key-masking oracle in tests).
        positions: (3, B, L) M-RoPE (t, h, w) positions, taken from the unpruned sequence.
        visual_mask: (B, L) bool, True at visual-token slots (DeepStack needs it).
        deepstack: per DeepStack level a (n_visual, D) tensor in slot order; empty if the family has none.
    """

    embeds: torch.Tensor
    attention_mask: torch.Tensor | dict[str, torch.Tensor]
    positions: torch.Tensor
    visual_mask: torch.Tensor
    deepstack: tuple[torch.Tensor, ...] = ()


class VLMAdapter(Protocol):
    """What the rest of sparsectx needs from a loaded VLM."""

    family: str
    model: PreTrainedModel
    image_token_id: int
    vision_signals: VisionSignals
    """The extra pruner signals ``encode_images`` records (``sparsectx.pruning.declared_signals``)."""

    def encode_images(self, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> list[ImageTokens]:
        """Returns one ``ImageTokens`` per image: vision tower + merger run once, plus pruner signals."""
        ...

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Returns the LLM input embeddings of token ``ids`` (any shape, int64)."""
        ...

    def run_llm(self, inputs: LLMInputs, cache: object | None) -> torch.Tensor:
        """Returns (B, L, D) final-norm hidden states; appends to ``cache`` (a transformers Cache) if given."""
        ...

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Returns (..., V) logits of hidden states (..., D); callers pass response positions only."""
        ...
