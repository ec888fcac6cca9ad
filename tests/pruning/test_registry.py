"""The pruner registry, its configs, and the checks ``select_tokens`` applies around every operator."""

from __future__ import annotations

import inspect

import pytest
import torch

from sparsectx.pruning import PRUNERS, select_tokens
from sparsectx.pruning.base import IN_LLM, PRE_LLM, PrunerSpec
from sparsectx.visual import Selection


def keyword_only(name: str) -> list[inspect.Parameter]:
    """Returns the keyword-only parameters of the operator registered as ``name``."""
    params = inspect.signature(PRUNERS.get(name).select).parameters.values()
    return [p for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]


def test_registered_names_equal_config_stems(pruner_confs):
    assert PRUNERS.names() == sorted(pruner_confs)
    assert len(PRUNERS.names()) >= 8  # the shipped ones at least: discovery found the package's modules


@pytest.mark.parametrize("name", PRUNERS.names())
def test_config_matches_operator_signature(name, pruner_confs):
    conf, spec = pruner_confs[name], PRUNERS.get(name)
    in_llm = spec.stage == IN_LLM
    assert set(conf) == ({"name", "stage", "layer", "params"} if in_llm else {"name", "stage", "params"})
    assert conf["name"] == name
    assert conf["stage"] == spec.stage
    assert sorted(conf["params"]) == sorted(p.name for p in keyword_only(name)) == sorted(spec.param_names)
    # Defaults live only in the YAML: the operator's own keyword-only arguments have none.
    assert all(p.default is inspect.Parameter.empty for p in keyword_only(name))


def test_unknown_name_lists_available_and_close_match(make_image):
    with pytest.raises(KeyError) as err:
        select_tokens("divprun", make_image(10), torch.zeros(1, 8), 0.5, torch.Generator(), {})
    message = str(err.value)
    assert "Did you mean 'divprune'" in message
    assert f"Available: {', '.join(PRUNERS.names())}" in message


@pytest.mark.parametrize("budget", [0.0, -0.1, 1.5, 2])
def test_budget_outside_unit_interval_names_value(budget, make_image):
    with pytest.raises(ValueError, match=rf"budget={budget!r} is outside \(0, 1\]"):
        select_tokens("random", make_image(10), torch.zeros(1, 8), budget, torch.Generator(), {})


def test_params_must_match_keyword_only_arguments(make_image):
    image, question = make_image(10), torch.zeros(1, 8)
    with pytest.raises(KeyError, match=r"unknown pruner.params.thetta \(did you mean 'theta'\?\)"):
        select_tokens("cdpruner", image, question, 0.5, torch.Generator(), {"theta": 0.5, "thetta": 0.5})
    with pytest.raises(KeyError, match=r"missing pruner.params.contextual_fraction"):
        select_tokens("visionzip", image, question, 0.5, torch.Generator(), {})


def broken(kind: str):
    """Returns an operator that violates the selection contract in the way ``kind`` names."""

    def operator(image, question_embeds, k, generator):
        n = image.num_tokens
        indices = {
            "never_prunes": torch.arange(n),
            "short": torch.arange(k - 1),
            "unsorted": torch.arange(k).flip(0),
            "repeated": torch.zeros(k, dtype=torch.long),
            "out_of_range": torch.arange(n - k + 1, n + 1),
            "int32": torch.arange(k, dtype=torch.int32),
        }[kind]
        selection = Selection.gather(image, torch.arange(k))
        return Selection(indices, selection.embeds, selection.deepstack)

    return operator


@pytest.fixture
def register(monkeypatch):  # noqa: ANN201
    """Returns ``add(name, operator)``, which registers a pre-LLM operator until the test ends."""
    monkeypatch.setattr(PRUNERS, "_entries", dict(PRUNERS._entries))
    return lambda name, operator: PRUNERS.register(name)(PrunerSpec(name=name, stage=PRE_LLM, select=operator))


@pytest.mark.parametrize("kind", ["never_prunes", "short", "unsorted", "repeated", "out_of_range", "int32"])
def test_contract_violations_raise(kind, make_image, register):
    register("broken", broken(kind))
    message = "pruner 'broken' broke its contract on an image of N=20 tokens, k=5"
    with pytest.raises(RuntimeError, match=message):
        select_tokens("broken", make_image(20), torch.zeros(1, 8), 0.25, torch.Generator(), {})


def test_missing_deepstack_level_raises(make_image, register):
    register("flat", lambda image, q, k, g: Selection(torch.arange(k), image.embeds[:k]))
    with pytest.raises(RuntimeError, match="returned 0 DeepStack levels, the image has 2"):
        select_tokens("flat", make_image(20), torch.zeros(1, 8), 0.25, torch.Generator(), {})
