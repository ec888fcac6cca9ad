"""The pruning-operator interface.

A pre-LLM operator is a pure function that receives one image's encoded tokens, the prompt's question
embeddings, the exact number of tokens to keep and a seeded generator, and returns a ``Selection``.
It runs after the merger and before the LLM, and sees the prompt only (never a response), so a
rollout's selection can be reused in its training forward.

In-LLM operators (FastV, DART) will declare ``stage="llm"`` and a layer K; the context builder then
keeps every token for layers < K and applies their selection as a hook between layers K-1 and K.
"""

from __future__ import annotations

from typing import Protocol

import torch

from sparsectx.visual import ImageTokens, Selection


class SelectTokens(Protocol):
    """Signature every pre-LLM operator implements (extra keyword arguments come from its YAML)."""

    def __call__(
        self,
        image: ImageTokens,
        question_embeds: torch.Tensor,
        k: int,
        generator: torch.Generator,
        **params: object,
    ) -> Selection:
        """Returns exactly ``k`` tokens of ``image``.

        Args:
            image: the image's post-merger tokens and signals.
            question_embeds: (T_q, D) LLM input embeddings of the user question's tokens only.
            k: tokens to keep, 1 <= k <= N (see ``sparsectx.budget.tokens_to_keep``).
            generator: the only source of randomness the operator may use.
        """
        ...
