"""The pruner spec: one record per operator, declared beside its code and registered by discovery, and the
checks that hold each declared fact (stage, merging, randomness, signals, parameter check) to what the operator
does."""

from __future__ import annotations

import pkgutil
from collections.abc import Mapping

import pytest
import torch

import sparsectx.pruning as pruning
from sparsectx.pruning import (
    INFRASTRUCTURE_MODULES,
    PRUNERS,
    declared_signals,
    register_operators,
    replay_selection,
    select_tokens,
)
from sparsectx.pruning.base import IN_LLM, PRE_LLM, PrunerSpec
from sparsectx.pruning.config import PrunerConfig
from sparsectx.visual import ImageTokens, Selection, VisionSignals


def operator_modules() -> list[str]:
    """Returns the stems of the modules of ``sparsectx.pruning`` that are operators (all but its machinery)."""
    found = [module.name for module in pkgutil.iter_modules(pruning.__path__)]
    return sorted(name for name in found if name not in INFRASTRUCTURE_MODULES)


def keep_first(image: ImageTokens, question_embeds: torch.Tensor, k: int, generator: torch.Generator) -> Selection:
    """A plain pre-LLM operator: the first k tokens."""
    return Selection.gather(image, torch.arange(k))


def halve_first(image: ImageTokens, question_embeds: torch.Tensor, k: int, generator: torch.Generator) -> Selection:
    """A merging pre-LLM operator: the first k tokens, their vectors halved (not a plain gather)."""
    kept = Selection.gather(image, torch.arange(k))
    return Selection(kept.indices, kept.embeds / 2, tuple(level / 2 for level in kept.deepstack))


def draw_k(image: ImageTokens, question_embeds: torch.Tensor, k: int, generator: torch.Generator) -> Selection:
    """A random pre-LLM operator: k tokens drawn from ``generator``."""
    return Selection.gather(image, torch.sort(torch.randperm(image.num_tokens, generator=generator)[:k]).values)


def lowest_attention(signals: object, k: int) -> torch.Tensor:
    """An in-LLM operator: the k lowest indices."""
    return torch.arange(k)


def with_default(image: ImageTokens, question_embeds: torch.Tensor, k: int, generator: torch.Generator, *, step=1):  # noqa: ANN001, ANN201
    """An operator whose keyword-only argument has a default in code."""
    return Selection.gather(image, torch.arange(k))


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """Returns ``add(spec)``, which registers ``spec`` until the test ends."""
    monkeypatch.setattr(PRUNERS, "_entries", dict(PRUNERS._entries))
    return lambda spec: PRUNERS.register(spec.name)(spec)


def test_every_operator_module_declares_the_spec_it_is_registered_under():
    for name in operator_modules():
        module = getattr(pruning, name)
        assert isinstance(module.SPEC, PrunerSpec), name
        assert module.SPEC.name == name
        assert PRUNERS.get(name) is module.SPEC
    assert PRUNERS.names() == operator_modules()


def test_shipped_specs_declare_the_facts_the_code_relies_on():
    by_fact = {
        "in_llm": {name for name in PRUNERS if PRUNERS.get(name).stage == IN_LLM},
        "merges": {name for name in PRUNERS if PRUNERS.get(name).merges},
        "seeded": {name for name in PRUNERS if PRUNERS.get(name).seeded},
        "signals": {name for name in PRUNERS if PRUNERS.get(name).signals is not None},
        "checked": {name for name in PRUNERS if PRUNERS.get(name).param_check is not None},
    }
    assert by_fact == {
        "in_llm": {"dart", "fastv"},
        "merges": {"visionzip"},
        "seeded": {"random"},
        "signals": {"hiprune", "zoo_prune"},
        "checked": {"dart", "hiprune", "zoo_prune"},
    }


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        ({"stage": "post_llm"}, r"stage='post_llm' .* one of \('pre_llm', 'llm'\)"),
        ({"stage": IN_LLM, "select": lowest_attention, "merges": True}, "in-LLM .* merges=True"),
        ({"stage": IN_LLM, "select": lowest_attention, "seeded": True}, "in-LLM .* seeded=True"),
        ({"merges": True, "seeded": True}, "merging .* seeded=True"),
        ({"select": with_default}, r"step=1 .* conf/pruner/toy\.yaml"),
        ({"name": "Toy-1"}, "name='Toy-1' .* lowercase snake case"),
    ],
)
def test_a_spec_refuses_contradictory_declarations(declared: Mapping[str, object], message: str):
    fields = {"name": "toy", "stage": PRE_LLM, "select": keep_first, **declared}
    with pytest.raises(ValueError, match=message):
        PrunerSpec(**fields)


def test_discovery_refuses_a_module_without_a_spec(operator_folder):
    path = operator_folder("toy_helpers", "def helper():\n    return 1\n")
    with pytest.raises(TypeError, match=rf"{path}: .*no SPEC .* add SPEC = PrunerSpec"):
        register_operators()


def test_discovery_refuses_a_spec_named_unlike_its_module(operator_folder):
    path = operator_folder(
        "toy_named",
        """
        import torch
        from sparsectx.pruning.base import PRE_LLM, PrunerSpec
        from sparsectx.visual import Selection

        def select_other(image, question_embeds, k, generator):
            return Selection.gather(image, torch.arange(k))

        SPEC = PrunerSpec(name="toy_other", stage=PRE_LLM, select=select_other)
        """,
    )
    with pytest.raises(ValueError, match=rf"{path}: SPEC.name='toy_other' .* rename the module toy_other.py"):
        register_operators()


def test_undeclared_merge_is_refused(registry, make_image):
    registry(PrunerSpec(name="toy_halves", stage=PRE_LLM, select=halve_first))
    with pytest.raises(RuntimeError, match="kept vectors are not its image's .* declare merges=True"):
        select_tokens("toy_halves", make_image(20), torch.zeros(1, 8), 0.25, torch.Generator(), {})


def test_undeclared_randomness_is_refused(registry, make_image):
    registry(PrunerSpec(name="toy_draws", stage=PRE_LLM, select=draw_k))
    with pytest.raises(RuntimeError, match="drew from the generator, .* declare seeded=True"):
        select_tokens("toy_draws", make_image(20), torch.zeros(1, 8), 0.25, torch.Generator(), {})
    registry(PrunerSpec(name="toy_seeded", stage=PRE_LLM, select=draw_k, seeded=True))
    select_tokens("toy_seeded", make_image(20), torch.zeros(1, 8), 0.25, torch.Generator(), {})


def test_replay_reruns_a_declared_merging_pruner(registry, make_image):
    registry(PrunerSpec(name="toy_halves", stage=PRE_LLM, select=halve_first, merges=True))
    image, recomputed = make_image(20, seed=1), make_image(20, seed=2)
    chosen = select_tokens("toy_halves", image, torch.zeros(1, 8), 0.25, torch.Generator(), {})
    replayed = replay_selection("toy_halves", recomputed, torch.zeros(1, 8), chosen, {})
    assert torch.equal(replayed.indices, chosen.indices)
    assert torch.equal(replayed.embeds, recomputed.embeds[:5] / 2)


def test_signals_and_parameter_check_come_from_the_spec(registry):
    def check(params: Mapping[str, object]) -> None:
        if params["depth"] < 1:
            raise ValueError(f"pruner.params.depth={params['depth']} must be >= 1")

    def select(image, question_embeds, k, generator, *, depth):  # noqa: ANN001, ANN202
        return Selection.gather(image, torch.arange(k))

    def signals(params: Mapping[str, object], seed: int) -> VisionSignals:
        return VisionSignals(object_attention=True)

    registry(PrunerSpec(name="toy_deep", stage=PRE_LLM, select=select, param_check=check, signals=signals))
    assert declared_signals("toy_deep", {"depth": 1}, 0) == VisionSignals(object_attention=True)
    assert PrunerConfig("toy_deep", PRE_LLM, {"depth": 2}).params == {"depth": 2}
    with pytest.raises(ValueError, match="pruner.params.depth=0 must be >= 1"):
        PrunerConfig("toy_deep", PRE_LLM, {"depth": 0})
