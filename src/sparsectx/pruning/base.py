"""The pruning-operator interface.

A pre-LLM operator is a pure function that receives one image's encoded tokens, the prompt's question
embeddings, the exact number of tokens to keep and a seeded generator, and returns a ``Selection``.
It runs after the merger and before the LLM, and sees the prompt only (never a response), so a
rollout's selection can be reused in its training forward.

In-LLM operators (FastV, DART; ``IN_LLM_PRUNERS``) declare ``stage: llm`` and a layer K and take
``(signals: ImageSignals, k, **params)`` instead (``sparsectx.pruning.layer``); the context builder then
keeps every token for layers < K and the hook ``sparsectx.models.in_llm`` drops the rest before layer K.

An operator that needs vision signals beyond the last block's (HiPrune: an object block's attention;
ZOO-Prune: the merger's sensitivity) declares them with a ``DeclareSignals`` function, and one whose
parameters have ranges checks them with a ``CheckParams`` function, run when the config is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import torch

from sparsectx.visual import ImageTokens, Selection, VisionSignals


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


class DeclareSignals(Protocol):
    """Says which extra vision signals an operator reads, for its params and the run's seed."""

    def __call__(self, params: Mapping[str, object], seed: int) -> VisionSignals:
        """Returns the signals the encode path must add to every ``ImageTokens`` for this operator.

        Args:
            params: the operator's keyword arguments (the YAML's ``params``).
            seed: the run's ``seed``; any random signal derives its own seed from it.
        """
        ...


class CheckParams(Protocol):
    """Checks an operator's parameter values before any model loads."""

    def __call__(self, params: Mapping[str, object]) -> None:
        """Raises ValueError naming ``pruner.params.<key>``, the value and the valid range when one is off."""
        ...
