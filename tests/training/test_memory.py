"""The ``memory.*`` switches: checkpointing and teacher offload leave the numbers unchanged, int8 AdamW states
are 8-bit, train comparably, and resume; on CPU the offload moves between cpu and cpu, so its placement logic
is tested through recorded moves (the real cpu<->cuda move is the GPU test's)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from sparsectx.training import loop, memory, steps
from sparsectx.training.config import load_train_config, run_defining
from sparsectx.training.student import mode
from sparsectx.training.update import accumulate_gradients, apply_update, build_optimizer

from .test_loop_support import FROZEN, TinyEnv, compose_train, make_trainer, shared_env, train_overrides


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


def count_layer_calls(model: torch.nn.Module) -> dict[str, int]:
    """Returns {"train": n, "eval": n}, filled by hooks on the decoder layers as the layers start.

    Pre-hooks, since a recomputation stops as soon as it has what backward needs (before any forward hook).
    """
    counts = {"train": 0, "eval": 0}

    def hook(module: torch.nn.Module, args: Any) -> None:
        counts["train" if module.training and torch.is_grad_enabled() else "eval"] += 1

    for layer in model.model.language_model.layers:
        layer.register_forward_pre_hook(hook)
    return counts


@pytest.mark.parametrize(
    "overrides",
    [
        ["method=lt_opd"],
        ["method=scopd_plus", "method.positions.delta=0.3", *FROZEN],
        ["method=scopd", "method.lora.dropout=0.1"],
    ],
    ids=["lt_opd_full_frozen", "scopd_plus_lora_probe", "scopd_lora_dropout_ema"],
)
def test_activation_checkpointing_recomputes_and_keeps_gradients(overrides, tiny_env, tmp_path) -> None:  # noqa: ANN001
    runs = {}
    for on in (False, True):
        trainer = make_trainer(
            tiny_env, tmp_path / str(on), *overrides, f"memory.activation_checkpointing={str(on).lower()}"
        )
        assert trainer.student.model.is_gradient_checkpointing is on
        counts = count_layer_calls(trainer.student.model)
        torch.manual_seed(0)  # the LoRA dropout masks come from the global generator
        stats, _, _ = accumulate_gradients(trainer)
        grads = {name: p.grad.clone() for name, p in trainer.student.trainable.items()}
        runs[on] = (stats, counts, grads)
    (stats_off, counts_off, grads_off), (stats_on, counts_on, grads_on) = runs[False], runs[True]
    layers, micro = 2, 2  # the tiny LLM's decoder layers; micro-batches per step
    assert counts_off["train"] == layers * micro  # one student forward per micro-batch
    assert counts_on["train"] == 2 * layers * micro  # ... and its recomputation in backward
    assert counts_on["eval"] == counts_off["eval"] > 0  # rollouts, teacher and probe passes: unchanged
    assert stats_on["loss"] == stats_off["loss"] > 0
    assert grads_on.keys() == grads_off.keys()
    for name, grad in grads_off.items():
        assert torch.equal(grads_on[name], grad), name
    assert any(g.abs().max() > 0 for g in grads_off.values())


def event_log(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Returns the list the run appends to: teacher passes (phased or inline), phase moves, student passes."""
    events: list[str] = []

    def wrap(module: Any, name: str, event: str) -> None:
        real = getattr(module, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            events.append(event)
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, recorded)

    wrap(memory, "teacher_logits", "teacher")
    wrap(steps, "teacher_logits", "inline teacher")
    wrap(steps, "build_context", "student")  # the student pass (the probe's would also count; none here)
    real_on_device = memory.on_device

    def on_device(model: torch.nn.Module, device: torch.device):  # noqa: ANN202
        events.append("to device")
        return real_on_device(model, device)

    monkeypatch.setattr(memory, "on_device", on_device)
    return events


def test_teacher_offload_phases_the_teacher_and_gives_identical_weights(tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    base = ["method=lt_opd", "method.optim.lr=0.01", "steps=2"]
    plain = loop.run(compose_train([*train_overrides(tiny_env, tmp_path / "plain"), *base]))
    events = event_log(monkeypatch)
    moved = []
    real_accumulate = loop.accumulate_gradients

    def placed(trainer: loop.Trainer):  # noqa: ANN202
        moved.append({p.device.type for p in trainer.student.frozen.model.parameters()})
        return real_accumulate(trainer)

    monkeypatch.setattr(loop, "accumulate_gradients", placed)
    offload = loop.run(
        compose_train([*train_overrides(tiny_env, tmp_path / "offload"), *base, "memory.teacher_offload=true"])
    )
    phase = ["to device", "teacher", "teacher", "student", "student"]
    assert events == phase * 2  # per step: one move for every micro-batch's teacher pass, then the students
    assert moved == [{"cpu"}, {"cpu"}]  # between phases the copy is on the CPU (trivially so on a CPU run)
    want, got = (load_file(str(r.checkpoint / "model.safetensors")) for r in (plain, offload))
    assert want.keys() == got.keys()
    assert all(torch.equal(got[key], want[key]) for key in want)  # byte-identical
    assert plain.metrics["train/loss"] == offload.metrics["train/loss"] > 0


class RecordedMoves(torch.nn.Linear):
    """A module whose ``to`` records where it was asked to go and moves nowhere (no CUDA needed)."""

    def __init__(self) -> None:
        super().__init__(2, 2)
        self.moves: list[str] = []

    def to(self, device: Any) -> RecordedMoves:  # type: ignore[override]
        self.moves.append(str(device))
        return self


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_on_device_moves_there_and_back_even_on_error(device: str, monkeypatch) -> None:  # noqa: ANN001
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    model = RecordedMoves()
    with memory.on_device(model, torch.device(device)) as inside:
        assert inside is model and model.moves == [device]
    assert model.moves == [device, "cpu"]
    with pytest.raises(KeyError), memory.on_device(model, torch.device(device)):
        raise KeyError("a failing teacher pass")
    assert model.moves == [device, "cpu", device, "cpu"]
    assert emptied == ([True, True] if device == "cuda" else [])
    real = torch.nn.Linear(2, 2)  # and a real module on CPU: its parameters stay put
    with memory.on_device(real, torch.device("cpu")):
        assert real.weight.device.type == "cpu"


def test_int8_states_are_8_bit_with_the_same_groups_and_schedule(tiny_env, tmp_path) -> None:  # noqa: ANN001
    trainers = {
        states: make_trainer(tiny_env, tmp_path / states, "method=lt_opd", f"memory.optimizer_states={states}")
        for states in ("fp32", "int8")
    }
    for trainer in trainers.values():
        for _ in range(2):
            accumulate_gradients(trainer)
            apply_update(trainer)
    fp32, int8 = (trainers[k].optimizer for k in ("fp32", "int8"))
    assert type(int8).__name__ == "AdamW8bit"
    assert group_settings(int8) == group_settings(fp32) and len(fp32.param_groups) == 2
    assert [float(g["lr"]) for g in int8.param_groups] == pytest.approx([g["lr"] for g in fp32.param_groups])
    quantized = 0
    for p in trainers["int8"].student.trainable.values():
        for key in ("exp_avg", "exp_avg_sq"):
            state = int8.state[p][key]
            if p.numel() >= 4096 and p.numel() % 256 == 0:  # torchao's rule (bitsandbytes'): big tensors only
                assert state.codes.dtype == torch.uint8 and state.codes.shape == p.shape
                quantized += p.numel()
            else:
                assert type(state) is torch.Tensor and state.dtype == torch.float32
    total = sum(p.numel() for p in trainers["int8"].student.trainable.values())
    assert quantized > 0.8 * 2 * total  # most of the tiny model's moments are 8-bit


def group_settings(optimizer: torch.optim.Optimizer) -> list[tuple[int, float, tuple[float, ...], float]]:
    """Returns per param group (tensor count, weight decay, betas, eps)."""
    return [(len(g["params"]), g["weight_decay"], tuple(g["betas"]), g["eps"]) for g in optimizer.param_groups]


def test_int8_adamw_reduces_a_loss_like_fp32(tiny_env, tmp_path) -> None:  # noqa: ANN001
    data = torch.Generator().manual_seed(0)
    inputs, target = torch.randn(256, 128, generator=data), torch.randn(256, 64, generator=data)
    init = 0.1 * torch.randn(128, 64, generator=data)
    final = {}
    for states in ("fp32", "int8"):
        tc = load_train_config(
            compose_train(
                [
                    *train_overrides(tiny_env, tmp_path),
                    "method=lt_opd",
                    "steps=60",
                    "method.optim.lr=0.01",
                    "method.optim.warmup_steps=0",
                    f"memory.optimizer_states={states}",
                ]
            )
        )
        weight, bias = torch.nn.Parameter(init.clone()), torch.nn.Parameter(torch.zeros(64))
        optimizer, scheduler = build_optimizer(tc, SimpleNamespace(trainable={"w": weight, "b": bias}))
        losses = []
        for _ in range(tc.steps):
            loss = ((inputs @ weight + bias - target) ** 2).mean()
            loss.backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
        final[states] = losses
    assert final["fp32"][0] == final["int8"][0]
    assert final["fp32"][-1] < 0.5 * final["fp32"][0]
    assert final["int8"][-1] == pytest.approx(final["fp32"][-1], rel=0.01)  # measured: 0.50684 vs 0.50683


def test_only_optimizer_states_defines_the_run(tiny_env, tmp_path) -> None:  # noqa: ANN001
    resolved = OmegaConf.to_container(compose_train(train_overrides(tiny_env, tmp_path)), resolve=True)
    assert {k for k in run_defining(resolved) if k.startswith("memory.")} == {"memory.optimizer_states"}
    assert resolved["memory"] == {
        "activation_checkpointing": False,
        "teacher_offload": False,
        "optimizer_states": "fp32",
    }  # the defaults are the plain run


def test_backward_runs_in_train_mode(tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    trainer = make_trainer(tiny_env, tmp_path, "method=scopd")
    seen = []
    real = trainer.accelerator.backward

    def backward(loss: torch.Tensor) -> None:
        seen.append(trainer.student.model.training)
        real(loss)

    monkeypatch.setattr(trainer.accelerator, "backward", backward)
    with mode(trainer.student.model, training=False):
        accumulate_gradients(trainer)
    assert seen == [True, True] and not trainer.student.model.training
