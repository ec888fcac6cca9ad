"""What an in-LLM pruner sees of one image, and the selection it returns (applied before decoder layer K).

The context builder treats a ``LayerSelection`` as "keep every token of this image for layers < K, then only
``indices``": the context holds all the image's tokens and carries a ``LateDrop`` for layer K. Everything
else (a rollout storing its kept indices, kept counts, the budget rule) reads it as any ``Selection``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from sparsectx.visual import Selection


@dataclass
class LayerSelection(Selection):
    """A ``Selection`` whose tokens are dropped before decoder layer ``layer`` instead of before the LLM.

    Attributes:
        layer: K, the first decoder layer that no longer sees the dropped tokens.
    """

    layer: int = field(kw_only=True)


@dataclass
class ImageSignals:
    """Layer K-1's view of one image of N tokens and of the prompt text that follows it.

    Attributes:
        attention: (N,) fp32 attention of the last prompt token to each image token (mean over heads).
        keys: (N, KV * d) fp32 post-RoPE keys of the image tokens.
        hidden: (N, D) fp32 final-normed hidden states of the image tokens entering layer K.
        text_keys: (T, KV * d) keys of the prompt's text tokens after the image (no response, no other image).
        text_hidden: (T, D) their final-normed hidden states.
    """

    attention: torch.Tensor
    keys: torch.Tensor
    hidden: torch.Tensor
    text_keys: torch.Tensor
    text_hidden: torch.Tensor

    @property
    def num_tokens(self) -> int:
        """Returns N, the image's token count."""
        return self.keys.shape[0]
