"""The recipe of docs/extending.md, "Add a method", followed with two toy method parts and a toy preset.

Each toy is exactly what the recipe says to write: a divergence added to ``sparsectx.training.divergences`` under
``@DIVERGENCES.register``, a reduction added to ``sparsectx.training.reduction`` under ``@REDUCTIONS.register``
(here run as if appended to those files, ``appended_to_module``), and one ``method/<name>.yaml`` preset that
starts from a shipped one and names them (here in a user's ``--config-dir``). No other file is written or edited:
the entry's command-line checks, the typed config and two optimizer steps of the one training loop then use the
toys, and each step's logged loss and divergence are the toys' own numbers.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from component_folders import appended_to_module
from hydra import compose

import sparsectx.training.divergences as divergences
import sparsectx.training.reduction as reduction
from sparsectx.cli import check_command_line, config_search
from sparsectx.training.config import load_train_config
from sparsectx.training.divergences import DIVERGENCES
from sparsectx.training.loop import run

from .test_loop_support import CONF_DIR, TinyEnv, shared_env, train_overrides

DIVERGENCE = '''
@DIVERGENCES.register("toy_total_variation")
def toy_total_variation(
    *,
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor,
    sampled_ids: torch.Tensor | None,
    top_k: int | None,
    chunk_size: int,
    temperature: float,
) -> torch.Tensor:
    """Returns (B, T) fp32 total variation 1/2 sum_v |q_v - p_v| of teacher q and student p, 0 outside ``mask``."""
    if top_k is not None:
        raise ValueError(f"top_k={top_k!r}: total variation compares whole distributions; set it to null")
    p = torch.softmax(student_logits.float() / temperature, dim=-1)
    q = torch.softmax(teacher_logits.detach().float() / temperature, dim=-1)
    return torch.where(mask, 0.5 * (q - p).abs().sum(-1), 0.0)
'''

REDUCTION = '''
@REDUCTIONS.register("toy_token_sum")
def toy_token_sum(per_token: torch.Tensor, mask: torch.Tensor, *, num_sequences: int) -> torch.Tensor:
    """Returns sum_it m_it l_it / num_sequences: each sequence's summed loss, averaged over the step's sequences."""
    _check(per_token, mask, num_sequences, "num_sequences")
    return torch.where(mask, per_token, 0.0).sum() / max(num_sequences, 1)
'''

PRESET = """\
# @package _global_
# SCOPD with the total-variation distance and summed token losses (tests/training/test_recipe_add_a_method.py).
#   python src/train.py method=toy_scopd_tv seed=0
defaults:
  - scopd
  - _self_

method:
  name: toy_scopd_tv
  reduction: toy_token_sum       # each sequence's summed loss, mean over sequences
  divergence:
    name: toy_total_variation    # 1/2 sum_v |q_v - p_v|; beta stays null (it takes none)
"""


@pytest.fixture(scope="module")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


@pytest.fixture
def toy_method(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Follows the recipe (the divergence, the reduction, the preset) and returns the user's config folder."""
    appended_to_module(divergences, DIVERGENCE, monkeypatch, DIVERGENCES)
    appended_to_module(reduction, REDUCTION, monkeypatch, reduction.REDUCTIONS)
    conf = tmp_path / "my_conf"
    (conf / "method").mkdir(parents=True)
    (conf / "method" / "toy_scopd_tv.yaml").write_text(PRESET)
    return conf


def compose_with(conf: Path, overrides: list[str]):  # noqa: ANN201
    """Returns ``train`` composed as ``src/train.py --config-dir <conf> <overrides>`` composes it."""
    with config_search(CONF_DIR, conf, None):
        return compose("train", overrides=overrides)


def test_the_config_checks_accept_the_toy_preset(toy_method: Path, tiny_env: TinyEnv, tmp_path: Path) -> None:
    argv = ["--config-dir", str(toy_method), "method=toy_scopd_tv", "budget=0.25"]
    check_command_line(CONF_DIR, "train", argv, True, None)  # the entry script's checks before Hydra runs
    cfg = load_train_config(compose_with(toy_method, [*train_overrides(tiny_env, tmp_path), *argv[2:]]))
    method = cfg.method
    assert (method.name, method.divergence.name, method.reduction) == (
        "toy_scopd_tv",
        "toy_total_variation",
        "toy_token_sum",
    )
    assert (method.teacher.kind, method.positions.name) == ("ema", "all")  # the rest is the preset it starts from


def test_the_toys_parameters_are_checked_against_their_signatures(toy_method: Path) -> None:
    with pytest.raises(ValueError, match="method.divergence.beta=0.5 is not used by divergence 'toy_total_variation'"):
        load_train_config(compose_with(toy_method, ["method=toy_scopd_tv", "method.divergence.beta=0.5"]))
    with pytest.raises(ValueError, match=r"method.reduction='toy_token_sums' is not one of \[.*'toy_token_sum'"):
        load_train_config(compose_with(toy_method, ["method=toy_scopd_tv", "method.reduction=toy_token_sums"]))


def test_a_reduction_taking_a_count_the_loop_does_not_offer_is_refused(
    toy_method: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = REDUCTION.replace("toy_token_sum", "toy_group_sum").replace("num_sequences", "num_groups")
    appended_to_module(reduction, source, monkeypatch, reduction.REDUCTIONS)
    with pytest.raises(ValueError, match=r"method.reduction='toy_group_sum' takes \['num_groups'\], which the loop"):
        load_train_config(compose_with(toy_method, ["method=toy_scopd_tv", "method.reduction=toy_group_sum"]))


def recording(registry_entries: dict[str, Callable], name: str, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Returns the list each call of registry entry ``name`` appends (arguments, keyword arguments, value) to; the
    entry is wrapped so that it still returns its own value and shows its own signature (``functools.wraps``: the
    config checks and the loop read it)."""
    calls: list[tuple] = []
    own = registry_entries[name]

    @functools.wraps(own)
    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        value = own(*args, **kwargs)
        calls.append((args, kwargs, value.detach()))
        return value

    monkeypatch.setitem(registry_entries, name, spy)
    return calls


@pytest.mark.slow
def test_two_steps_train_with_the_toys(
    toy_method: Path, tiny_env: TinyEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # spies keep each toy's own body: the loop must reach them through the registries, by the preset's names
    divergence_calls = recording(DIVERGENCES._entries, "toy_total_variation", monkeypatch)
    reduction_calls = recording(reduction.REDUCTIONS._entries, "toy_token_sum", monkeypatch)
    result = run(compose_with(toy_method, [*train_overrides(tiny_env, tmp_path), "method=toy_scopd_tv"]))
    assert (result.steps, result.samples_seen) == (2, 4)
    assert result.run_dir.parent.parent.name == "toy_scopd_tv"

    steps = [json.loads(line) for line in (result.run_dir / "steps.jsonl").read_text().splitlines()]
    assert len(divergence_calls) == len(reduction_calls) == 4  # 2 steps x 2 micro-batches of one prompt
    for step, record in enumerate(steps):
        micro = range(2 * step, 2 * step + 2)
        selected = [divergence_calls[i][1]["mask"] for i in micro]
        values = [divergence_calls[i][2][mask] for i, mask in zip(micro, selected, strict=True)]
        divergence = float(sum(v.sum() for v in values)) / sum(int(m.sum()) for m in selected)
        assert record["train/divergence"] == pytest.approx(divergence, rel=1e-6)
        assert all(float(v.min()) >= 0.0 and float(v.max()) <= 1.0 for v in values)  # a total variation
        assert set(reduction_calls[2 * step][1]) == {"num_sequences"}  # the counts its signature takes
        assert record["train/loss"] == pytest.approx(sum(float(reduction_calls[i][2]) for i in micro), rel=1e-6)
        for i in micro:  # the reduction reduced the toy divergence's values (objective distill)
            assert torch.equal(reduction_calls[i][0][0].detach(), divergence_calls[i][2])
