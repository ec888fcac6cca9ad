"""The ``pruner`` config group (``conf/pruner/*.yaml``), shared by training and evaluation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparsectx.pruning import PRUNERS, check_params


@dataclass
class PrunerConfig:
    """One pruning operator and its parameters."""

    name: str
    """Registry key in ``sparsectx.pruning.PRUNERS``; equals the YAML stem."""
    stage: str
    """``pre_llm``: selection after the merger, before the LLM (the only stage implemented)."""
    params: dict[str, Any]
    """The operator's keyword-only arguments, exactly."""

    def __post_init__(self) -> None:
        try:
            operator = PRUNERS.get(self.name)
        except KeyError as err:
            raise KeyError(f"pruner.name={self.name!r}: {err.args[0]}") from None
        if self.stage != "pre_llm":
            raise ValueError(f"pruner.stage={self.stage!r}: only pre_llm operators are implemented")
        check_params(self.name, operator, self.params)
