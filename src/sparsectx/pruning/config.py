"""The ``pruner`` config group (``conf/pruner/*.yaml``), shared by training and evaluation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transformers import AutoConfig

from sparsectx.models.families import FAMILIES
from sparsectx.models.loading import resolve_model_path
from sparsectx.pruning import PRUNERS, check_params, pruners_at
from sparsectx.pruning.base import IN_LLM, PRE_LLM, STAGES


@dataclass
class PrunerConfig:
    """One pruning operator and its parameters."""

    name: str
    """Registry key in ``sparsectx.pruning.PRUNERS``; equals the YAML stem."""
    stage: str
    """``pre_llm``: selection after the merger, before the LLM; ``llm``: before decoder layer ``layer``. The
    operator's ``PrunerSpec.stage`` says which; the YAML restates it so the recorded config shows it."""
    params: dict[str, Any]
    """The operator's keyword-only arguments, exactly."""
    layer: int | None = None
    """K for ``stage: llm``: layers 0..K-1 see every token, layers >= K the kept ones (1 <= K < the LLM's
    layer count, checked against the model config by ``check_layer``); None for ``pre_llm``."""

    def __post_init__(self) -> None:
        try:
            spec = PRUNERS.get(self.name)
        except KeyError as err:
            raise KeyError(f"pruner.name={self.name!r}: {err.args[0]}") from None
        expected = spec.stage
        if self.stage != expected:
            raise ValueError(
                f"pruner.stage={self.stage!r}: pruner {self.name!r} runs at stage {expected!r} "
                f"(one of {STAGES}); set pruner.stage={expected}"
            )
        if expected == IN_LLM and (isinstance(self.layer, bool) or not isinstance(self.layer, int) or self.layer < 1):
            raise ValueError(
                f"pruner.layer={self.layer!r}: an in-LLM pruner needs the decoder layer K it prunes "
                "before, an integer >= 1 (layers 0..K-1 see every token), e.g. pruner.layer=2"
            )
        if expected == PRE_LLM and self.layer is not None:
            raise ValueError(f"pruner.layer={self.layer!r}: pre-LLM pruner {self.name!r} takes no layer; remove it")
        check_params(spec, self.params)

    def check_layer(self, num_layers: int) -> None:
        """Raises ValueError naming ``pruner.layer`` unless K lies in [1, num_layers - 1]."""
        if self.layer is not None and not 1 <= self.layer < num_layers:
            raise ValueError(
                f"pruner.layer={self.layer} is outside [1, {num_layers - 1}]: the model's LLM has "
                f"{num_layers} decoder layers and K must leave at least one layer after the drop; "
                "set pruner.layer lower"
            )

    def check_model(self, model_path: str) -> None:
        """Raises ValueError naming ``pruner.layer`` when this in-LLM pruner cannot run on ``model_path``'s model:
        its family's record says in-LLM pruning cannot (``FamilySpec.in_llm_unsupported``; the error names the
        registry's pre-LLM pruners), or K is not below the depth of its LLM.

        Reads only its ``config.json`` (no weights), so either fails before any model loads.
        """
        if self.layer is not None:
            config = AutoConfig.from_pretrained(resolve_model_path(model_path))
            if config.model_type in FAMILIES.model_types():  # another model_type is refused when the model loads
                family = FAMILIES.for_model_type(config.model_type)
                if family.in_llm_unsupported is not None:
                    choices = ", ".join(pruners_at(PRE_LLM))
                    raise family.in_llm_refusal(self.layer, f"a pre-LLM pruner (pruner={choices})")
            self.check_layer(config.get_text_config().num_hidden_layers)
