"""The model-adapter interface: the only place that knows a VLM family's internals.

Everything outside ``sparsectx.models`` talks to a VLM through ``VLMAdapter``: encode images once into
``ImageTokens``, embed text ids, run the language model on prepared input embeddings with explicit
3D positions and a 2D mask, and project hidden states to logits at chosen positions only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch
from transformers import PreTrainedModel

from sparsectx.visual import ImageTokens, VisionSignals

if TYPE_CHECKING:
    from sparsectx.models.in_llm import LateDrop, LayerSignals


@dataclass
class LLMInputs:
    """Prepared language-model inputs for a (left-padded) batch.

    Attributes:
        embeds: (B, L, D) input embeddings, visual slots already filled.
        attention_mask: (B, L) 1 for real tokens, 0 for padding; or a dict of ready 4D masks keyed by
            layer type (used by the key-masking oracle in tests).
        positions: (3, B, L) M-RoPE (t, h, w) positions, taken from the unpruned sequence (a 1-D family: its
            position in all three rows).
        visual_mask: (B, L) bool, True at visual-token slots (DeepStack needs it).
        deepstack: per DeepStack level a (n_visual, D) tensor in slot order; empty if the family has none.
        late: visual slots an in-LLM pruner drops before its layer K (``sparsectx.models.in_llm``); None =
            every slot runs through every layer.
    """

    embeds: torch.Tensor
    attention_mask: torch.Tensor | dict[str, torch.Tensor]
    positions: torch.Tensor
    visual_mask: torch.Tensor
    deepstack: tuple[torch.Tensor, ...] = ()
    late: LateDrop | None = None


class VLMAdapter(Protocol):
    """What the rest of sparsectx needs from a loaded VLM."""

    family: str
    model: PreTrainedModel
    image_token_id: int
    video_token_id: int
    """A video's pad token in the processor's ids; encoding turns its slots into ``image_token_id``."""
    vision_signals: VisionSignals
    """The extra pruner signals ``encode_images`` records (``sparsectx.pruning.declared_signals``)."""

    def encode_images(self, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> list[ImageTokens]:
        """Returns one ``ImageTokens`` per image: vision tower + merger run once, plus pruner signals.

        ``grid_thw`` is the processor's per-image layout: (t, h, w) patch grids for the Qwen-VL and GLM
        towers, (views, height, width) for LLaVA-OneVision's tiles (``llava_onevision_processor``).
        """
        ...

    def encode_videos(
        self, pixel_values: torch.Tensor, grid_thw: torch.Tensor, second_per_grid: torch.Tensor | None
    ) -> list[ImageTokens]:
        """Returns one ``ImageTokens`` per video (grid (t, h, w), t temporal patches), or raises a config error
        naming the family when it has no video path (``sparsectx.models.video_input``)."""
        ...

    def prompt_positions(self, ids: torch.Tensor, images: list[ImageTokens]) -> tuple[torch.Tensor, int]:
        """Returns an unpruned prompt's (3, L) positions and its next free position (``models.positions``).

        3-D M-RoPE families give (t, h, w) rows; a 1-D family gives its position in all three rows and its
        ``run_llm`` reads row 0, so contexts and the decode engine carry three rows for every family.
        """
        ...

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Returns the LLM input embeddings of token ``ids`` (any shape, int64)."""
        ...

    def run_llm(self, inputs: LLMInputs, cache: object | None) -> torch.Tensor:
        """Returns (B, L, D) final-norm hidden states; appends to ``cache`` (a transformers Cache) if given.

        With ``inputs.late`` set, its dropped slots leave before its layer K and their output rows are zero.
        """
        ...

    def llm_signals(self, inputs: LLMInputs, layer: int, query_index: torch.Tensor) -> LayerSignals:
        """Returns the signals of decoder layer ``layer`` - 1 that in-LLM pruners score (prompts only)."""
        ...

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Returns (..., V) logits of hidden states (..., D); callers pass response positions only."""
        ...
