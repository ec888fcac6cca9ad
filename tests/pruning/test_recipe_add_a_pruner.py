"""The recipe of docs/extending.md, "Add a pruner", followed with two toy pruners (one pre-LLM, one in-LLM).

Each toy is exactly what the recipe says to write: one module in ``sparsectx.pruning`` (here in a folder the
package searches after its own, ``operator_folder``) and one ``pruner/<name>.yaml`` (here in a user's
``--config-dir``). No other file is written or edited: the entry's command-line checks, the typed config, the
selection entry points and an evaluation run then accept the toy as they accept a shipped pruner.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from eval.test_runner_support import CONF, SIDE, base_overrides, build_model_dir, write_bench
from hydra import compose

from sparsectx.cli import check_command_line, config_search
from sparsectx.eval.config import load_eval_config
from sparsectx.eval.runner import run
from sparsectx.pruning import PRUNERS, declared_signals, register_operators, select_tokens
from sparsectx.pruning.base import IN_LLM, PRE_LLM
from sparsectx.visual import VisionSignals

PRE_LLM_MODULE = '''
"""Toy pre-LLM pruner: the first (or last) k tokens of each image."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from sparsectx.pruning.base import PRE_LLM, PrunerSpec
from sparsectx.visual import ImageTokens, Selection


def select_toy_ends(
    image: ImageTokens, question_embeds: torch.Tensor, k: int, generator: torch.Generator, *, from_end: bool
) -> Selection:
    """Returns the first k tokens of ``image``, or its last k with ``from_end``."""
    start = image.num_tokens - k if from_end else 0
    return Selection.gather(image, torch.arange(start, start + k))


def check_toy_ends_params(params: Mapping[str, object]) -> None:
    """Raises ValueError unless ``pruner.params.from_end`` is a bool."""
    if not isinstance(params["from_end"], bool):
        raise ValueError(f"pruner.params.from_end={params['from_end']!r} must be true or false")


SPEC = PrunerSpec(name="toy_ends", stage=PRE_LLM, select=select_toy_ends, param_check=check_toy_ends_params)
'''

PRE_LLM_YAML = """\
# Toy pre-LLM pruner (tests/pruning/test_recipe_add_a_pruner.py).
name: toy_ends
stage: pre_llm
params:
  from_end: false  # keep the last k tokens instead of the first k
"""

IN_LLM_MODULE = '''
"""Toy in-LLM pruner: the k image tokens the last prompt token attends to least at layer K-1."""

from __future__ import annotations

import torch

from sparsectx.pruning.base import IN_LLM, PrunerSpec


def select_toy_quiet(signals: ImageSignals, k: int) -> torch.Tensor:
    """Returns the (k,) ascending indices of the tokens of least attention (ties: lower index)."""
    return torch.sort(torch.sort(signals.attention.float(), stable=True).indices[:k]).values


SPEC = PrunerSpec(name="toy_quiet", stage=IN_LLM, select=select_toy_quiet)
'''

IN_LLM_YAML = """\
# Toy in-LLM pruner (tests/pruning/test_recipe_add_a_pruner.py).
name: toy_quiet
stage: llm
layer: 1  # K
params: {}
"""


@pytest.fixture
def toy_pruners(operator_folder, tmp_path: Path) -> Path:
    """Follows the recipe for both toys and returns the user's config folder holding their YAMLs."""
    conf = tmp_path / "my_conf"
    (conf / "pruner").mkdir(parents=True)
    operator_folder("toy_ends", PRE_LLM_MODULE)
    operator_folder("toy_quiet", IN_LLM_MODULE)
    (conf / "pruner" / "toy_ends.yaml").write_text(PRE_LLM_YAML)
    (conf / "pruner" / "toy_quiet.yaml").write_text(IN_LLM_YAML)
    register_operators()  # what importing sparsectx.pruning does for the modules beside the shipped ones
    return conf


def compose_with(conf: Path, overrides: list[str]):  # noqa: ANN201
    """Returns ``evaluate`` composed as ``src/evaluate.py --config-dir <conf> <overrides>`` composes it."""
    with config_search(CONF, conf, None):
        return compose("evaluate", overrides=overrides)


def test_the_two_files_are_found_and_registered(toy_pruners):
    assert {"toy_ends", "toy_quiet"} <= set(PRUNERS.names())
    assert (PRUNERS.get("toy_ends").stage, PRUNERS.get("toy_quiet").stage) == (PRE_LLM, IN_LLM)
    assert declared_signals("toy_ends", {"from_end": False}, 0) == VisionSignals()


@pytest.mark.parametrize("name", ["toy_ends", "toy_quiet"])
def test_the_config_checks_accept_the_toy(toy_pruners, name):
    argv = ["--config-dir", str(toy_pruners), f"pruner={name}", "budget=0.5"]
    check_command_line(CONF, "evaluate", argv, False, None)  # the entry script's checks before Hydra runs
    cfg = load_eval_config(compose_with(toy_pruners, argv[2:]))
    assert (cfg.pruner.name, cfg.pruner.stage) == (name, PRUNERS.get(name).stage)


def test_the_toys_parameter_check_runs_with_the_config(toy_pruners):
    with pytest.raises(ValueError, match="pruner.params.from_end=3 must be true or false"):
        load_eval_config(compose_with(toy_pruners, ["pruner=toy_ends", "pruner.params.from_end=3"]))
    with pytest.raises(KeyError, match=r"unknown pruner.params.from_start\. .* conf/pruner/toy_ends\.yaml"):
        load_eval_config(
            compose_with(toy_pruners, ["pruner=toy_ends", "~pruner.params.from_end", "+pruner.params.from_start=true"])
        )


def test_the_selection_entry_points_run_the_toy(toy_pruners, make_image):
    image = make_image(10)
    chosen = select_tokens("toy_ends", image, torch.zeros(1, 8), 0.3, torch.Generator(), {"from_end": True})
    assert chosen.indices.tolist() == [7, 8, 9]
    with pytest.raises(ValueError, match="pruner 'toy_quiet' prunes inside the LLM"):
        select_tokens("toy_quiet", image, torch.zeros(1, 8), 0.3, torch.Generator(), {})


@pytest.mark.slow
@pytest.mark.parametrize("name", ["toy_ends", "toy_quiet"])
def test_an_evaluation_runs_with_the_toy(toy_pruners, tmp_path, name):
    model = build_model_dir(tmp_path / "model", "qwen2_5_vl", weights=True)
    bench = {"syn_count": write_bench(tmp_path / "syn_count.tsv", "syn_count", 2, SIDE)}
    overrides = ["bench=syn_count", *base_overrides(model, tmp_path / "results", bench, 4), f"pruner={name}"]
    (out,) = run(compose_with(toy_pruners, [*overrides, "budget=0.25"]))
    result = json.loads(out.read_text())
    assert (result["pruner"], result["n_scored"]) == (name, 2)
    assert out == tmp_path / "results" / "dev" / "tiny" / "base" / name / "0.25" / "syn_count.json"
