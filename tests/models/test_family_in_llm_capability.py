"""Whether in-LLM pruners can run on a family is a fact of its record (``FamilySpec.in_llm_unsupported``); the
config check that knows the pruner's stage (``PrunerConfig.check_model``, before any model loads) refuses an
in-LLM pruner on such a family and names the pre-LLM pruners the registry holds, so a family module lists none.
"""

from __future__ import annotations

import pytest
import yaml

from sparsectx.models.families import FAMILIES
from sparsectx.models.published import published_folder
from sparsectx.paths import CONF_DIR
from sparsectx.pruning import pruners_at
from sparsectx.pruning.base import IN_LLM, PRE_LLM
from sparsectx.pruning.config import PrunerConfig


def test_only_qwen3_5_declares_in_llm_pruning_unsupported():
    assert [spec.name for spec in FAMILIES if spec.in_llm_unsupported is not None] == ["qwen3_5"]


@pytest.mark.parametrize("name", pruners_at(IN_LLM))
def test_an_in_llm_pruner_on_qwen3_5_is_refused_before_loading_naming_the_registrys_pre_llm_pruners(name):
    pruner = PrunerConfig(**yaml.safe_load((CONF_DIR / "pruner" / f"{name}.yaml").read_text()))
    with pytest.raises(ValueError) as refused:
        pruner.check_model(str(published_folder("Qwen3.5-4B")))
    message = str(refused.value)
    assert message.startswith("pruner.stage=llm (pruner.layer=2) is not supported on model family 'qwen3_5': ")
    assert "linear attention" in message
    assert message.endswith(f"choose a pre-LLM pruner (pruner={', '.join(pruners_at(PRE_LLM))})")


def test_an_in_llm_pruner_on_a_family_that_supports_it_passes_the_check():
    PrunerConfig("fastv", IN_LLM, {}, layer=2).check_model(str(published_folder("Qwen3-VL-4B-Instruct")))
