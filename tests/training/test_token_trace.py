"""Per-token traces (``token_trace``): a tiny SCOPD+ run writes its first and last steps' rollouts with KL, S and
the selection; the KL is the float64 KL(teacher‖student) of the logits the step held; a resumed run writes each
traced step once; methods without a probe write no S; the setting is checked."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from sparsectx.paths import token_trace_path
from sparsectx.training import loop
from sparsectx.training.config import load_train_config
from sparsectx.training.token_trace import TRACE_KEYS, TokenTrace

from .reference import kl64, probs64
from .test_loop_support import TinyEnv, compose_train, shared_env, train_overrides
from .test_resume import Killed


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


SCOPD_PLUS = [
    "method=scopd_plus",
    "method.positions.delta=0.3",
    "steps=3",
    "save_every=2",
    "method.optim.lr=0.01",
    "max_new_tokens=8",
    "token_trace=2",
]
"""Three steps of two rollouts (one per micro-batch), both traced at steps 1 and 3."""


def read_lines(run: Path) -> list[dict]:
    """Returns the run's trace lines."""
    return [json.loads(line) for line in token_trace_path(run).read_text().splitlines()]


def test_first_and_last_steps_are_traced_with_the_kl_of_the_step_logits(tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    captured: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
    real = TokenTrace.add

    def capturing(self: TokenTrace, cfg, tokenizer, mb, s_logits, t_logits, sensitivity, selected) -> None:  # noqa: ANN001
        if not self.lines:  # the step's first rollout: keep what its KL is computed from
            captured[self.step] = (s_logits[0].detach().clone(), t_logits[0].clone(), mb.ids[0].clone())
        real(self, cfg, tokenizer, mb, s_logits, t_logits, sensitivity, selected)

    monkeypatch.setattr(TokenTrace, "add", capturing)
    result = loop.run(compose_train([*train_overrides(tiny_env, tmp_path), *SCOPD_PLUS]))
    lines = read_lines(result.run_dir)
    assert [(line["step"], line["rollout"]) for line in lines] == [(1, 0), (1, 1), (3, 0), (3, 1)]
    for line in lines:
        assert set(line) == set(TRACE_KEYS)
        length = len(line["token_ids"])
        assert length >= 1 and all(len(line[k]) == length for k in ("tokens", "kl", "sensitivity", "selected"))
        assert all(0.0 <= s <= math.log(2) + 1e-6 for s in line["sensitivity"])
        assert all(k >= 0.0 for k in line["kl"])
        assert sum(line["selected"]) == math.ceil(0.1 * length)  # ρ = 10% of the response (SCOPD Eq. 8)
        assert (line["fraction"], line["temperature"], line["budget"]) == (0.1, 1.0, 0.1)
    for step in (1, 3):
        s_logits, t_logits, ids = captured[step]
        line = next(line for line in lines if (line["step"], line["rollout"]) == (step, 0))
        assert line["token_ids"] == ids[: len(line["token_ids"])].tolist()
        t = len(line["token_ids"]) - 1  # the last response token
        expected = float(kl64(probs64(t_logits[t], 1.0), probs64(s_logits[t], 1.0)))
        # fp32 noise is ~5e-8; at step 3 (KL ~1e-2) the reverse KL(student‖teacher) is 0.5% away: out of tolerance
        assert line["kl"][t] == pytest.approx(expected, rel=1e-4, abs=2e-7)


def test_a_resumed_run_writes_each_traced_step_once(tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    straight = loop.run(compose_train([*train_overrides(tiny_env, tmp_path / "straight"), *SCOPD_PLUS]))
    cfg = compose_train([*train_overrides(tiny_env, tmp_path / "killed"), *SCOPD_PLUS])
    real = loop.save

    def dying(trainer: loop.Trainer, *args: object) -> None:
        if trainer.step == 3:  # step 3's traces are written, its state is not: the resume redoes step 3
            raise Killed
        real(trainer, *args)

    with monkeypatch.context() as patch:
        patch.setattr(loop, "save", dying)
        with pytest.raises(Killed):
            loop.run(cfg)
    run = next((tmp_path / "killed").glob("*/*/*/*/*"))
    assert [line["step"] for line in read_lines(run)] == [1, 1, 3, 3]
    loop.run(cfg)
    want, got = read_lines(straight.run_dir), read_lines(run)
    key = lambda line: (line["step"], line["item"], line["token_ids"])  # noqa: E731
    assert [key(g) for g in got] == [key(w) for w in want]
    for w, g in zip(want, got, strict=True):
        assert g["kl"] == pytest.approx(w["kl"], rel=1e-4, abs=1e-8)


def test_a_method_without_a_probe_traces_no_sensitivity_and_zero_traces_nothing(tiny_env, tmp_path) -> None:  # noqa: ANN001
    common = [*train_overrides(tiny_env, tmp_path / "on"), "method=scopd", "max_new_tokens=4"]
    lines = read_lines(loop.run(compose_train([*common, "token_trace=1"])).run_dir)
    assert [line["step"] for line in lines] == [1, 2]
    assert all(line["sensitivity"] is None and len(line["kl"]) == len(line["tokens"]) for line in lines)
    assert all(all(line["selected"]) for line in lines)  # SCOPD distils every position
    off = loop.run(compose_train([*train_overrides(tiny_env, tmp_path / "off"), "method=scopd", "max_new_tokens=4"]))
    assert not token_trace_path(off.run_dir).exists()


def test_a_negative_token_trace_names_the_key(tiny_env, tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match=r"token_trace=-1 must be an int >= 0"):
        load_train_config(compose_train([*train_overrides(tiny_env, tmp_path), "token_trace=-1"]))
