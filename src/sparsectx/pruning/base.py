"""The pruning-operator interface and the spec record each operator declares beside its code.

A pre-LLM operator is a pure function that receives one image's encoded tokens, the prompt's question
embeddings, the exact number of tokens to keep and a seeded generator, and returns a ``Selection``.
It runs after the merger and before the LLM, and sees the prompt only (never a response), so a
rollout's selection can be reused in its training forward.

In-LLM operators (``stage=IN_LLM``: FastV, DART) take ``(signals: ImageSignals, k, **params)`` instead
(``sparsectx.pruning.layer``); the context builder then keeps every token for layers < K and the hook
``sparsectx.models.in_llm`` drops the rest before layer K.

An operator that needs vision signals beyond the last block's (HiPrune: an object block's attention;
ZOO-Prune: the merger's sensitivity) declares them with a ``DeclareSignals`` function, and one whose
parameters have ranges checks them with a ``CheckParams`` function, run when the config is built.

Everything the rest of the code knows about an operator is its ``PrunerSpec``: each operator module ends
with ``SPEC = PrunerSpec(...)``, which ``sparsectx.pruning.register_operators`` registers under its name.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import torch

from sparsectx.layer_selection import ImageSignals
from sparsectx.visual import ImageTokens, Selection, VisionSignals

PRE_LLM = "pre_llm"
"""Stage of an operator that selects after the merger, before the LLM (``select_tokens``)."""
IN_LLM = "llm"
"""Stage of an operator that selects before decoder layer K from layer K-1's signals (``pruning.layer``)."""
STAGES = (PRE_LLM, IN_LLM)


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


class SelectInLLM(Protocol):
    """Signature every in-LLM operator implements (extra keyword arguments come from its YAML)."""

    def __call__(self, signals: ImageSignals, k: int, **params: object) -> torch.Tensor:
        """Returns the (k,) int64 ascending indices of the image tokens kept from layer K on.

        Args:
            signals: the image's layer K-1 signals (and the prompt text's after it).
            k: tokens to keep, 1 <= k <= N.
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


@dataclass(frozen=True)
class PrunerSpec:
    """Everything the rest of the code needs to know about one pruning operator, declared beside its code.

    The registry key, the config's stage and the consumers' branches all read this record: selection
    (``select_tokens`` / ``pruning.layer``), the config check (``PrunerConfig``), the encode path's signals
    (``declared_signals``) and the trained vision tower's replay (``replay_selection``).
    """

    name: str
    """Registry key: the operator module's stem and the stem of ``conf/pruner/<name>.yaml`` (lowercase snake case)."""
    stage: str
    """``PRE_LLM`` or ``IN_LLM``; the YAML's ``stage`` must say the same (``PrunerConfig``)."""
    select: SelectTokens | SelectInLLM
    """The operator: ``SelectTokens`` for ``PRE_LLM``, ``SelectInLLM`` for ``IN_LLM``. Its keyword-only
    arguments are exactly the YAML's ``params`` and have no defaults (the YAML is their one place)."""
    merges: bool = False
    """Its kept vectors are not a plain gather of the image's tokens (VisionZip adds each contextual target's
    members' mean): ``replay_selection`` re-runs it on recomputed vectors; otherwise ``select_tokens`` checks
    that the kept vectors are the image's own."""
    param_check: CheckParams | None = None
    """Range check of the ``params`` values, run with the config (``check_params``); None: any value."""
    signals: DeclareSignals | None = None
    """The extra vision signals it reads (``declared_signals``); None: the last block's only."""
    seeded: bool = False
    """It draws from the generator, so its choice changes with the run's seed; otherwise ``select_tokens``
    checks that it leaves the generator untouched."""

    def __post_init__(self) -> None:
        problems = []
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.name):
            problems.append(f"name={self.name!r} must be lowercase snake case (it names conf/pruner/<name>.yaml)")
        if self.stage not in STAGES:
            problems.append(f"stage={self.stage!r} must be one of {STAGES}")
        if self.stage == IN_LLM and self.merges:
            problems.append("an in-LLM operator returns indices, so it cannot declare merges=True")
        if self.stage == IN_LLM and self.seeded:
            problems.append("an in-LLM operator receives no generator, so it cannot declare seeded=True")
        if self.merges and self.seeded:
            problems.append(
                "a merging operator is re-run to replay its choice (replay_selection), so it cannot declare seeded=True"
            )
        defaults = [
            f"{p.name}={p.default!r}"
            for p in inspect.signature(self.select).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is not inspect.Parameter.empty
        ]
        if defaults:
            problems.append(
                f"keyword-only arguments {', '.join(defaults)} have defaults in code; remove them and set the "
                f"values under params in conf/pruner/{self.name}.yaml"
            )
        if problems:
            raise ValueError(f"PrunerSpec {self.name!r}: " + "; ".join(problems))

    @property
    def param_names(self) -> list[str]:
        """Returns the operator's keyword-only argument names: exactly the keys of the YAML's ``params``."""
        parameters = inspect.signature(self.select).parameters.values()
        return [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]
