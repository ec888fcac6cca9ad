"""EMA: lazy init, the update formula over several steps, resume, and a bit-exact swap."""

from __future__ import annotations

import pytest
import torch

from sparsectx.training.ema import ParameterEMA


def make_params(seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "layer.lora_A": torch.randn(4, 3, generator=gen).bfloat16(),
        "layer.lora_B": torch.randn(3, 4, generator=gen),
    }


def test_lazy_init_copies_then_follows_the_formula() -> None:
    decay = 0.9
    ema = ParameterEMA(decay)
    assert not ema.initialized and ema.shadow() == {}

    steps = [make_params(seed) for seed in range(4)]
    ema.update(steps[0])
    assert ema.initialized and ema.num_updates == 1
    for name, value in steps[0].items():
        assert ema.shadow()[name].dtype == torch.float32
        assert torch.equal(ema.shadow()[name], value.float())  # a copy, no decay applied

    want = {name: value.double() for name, value in steps[0].items()}
    for params in steps[1:]:
        ema.update(params)
        want = {name: decay * want[name] + (1 - decay) * params[name].double() for name in want}
    assert ema.num_updates == 4
    for name in want:
        torch.testing.assert_close(ema.shadow()[name].double(), want[name], atol=1e-6, rtol=1e-6)


def test_update_does_not_alias_or_track_gradients() -> None:
    weight = torch.randn(3, requires_grad=True)
    ema = ParameterEMA(0.5)
    ema.update({"w": weight})
    with torch.no_grad():
        weight.add_(1.0)
    assert not torch.equal(ema.shadow()["w"], weight.detach())
    assert not ema.shadow()["w"].requires_grad


def test_state_dict_round_trip_resumes_identically() -> None:
    uninterrupted, first_half = ParameterEMA(0.99), ParameterEMA(0.99)
    for seed in range(3):
        uninterrupted.update(make_params(seed))
        first_half.update(make_params(seed))
    resumed = ParameterEMA(0.99)
    resumed.load_state_dict(first_half.state_dict())
    for seed in range(3, 6):
        uninterrupted.update(make_params(seed))
        resumed.update(make_params(seed))
    assert resumed.num_updates == uninterrupted.num_updates == 6
    for name, value in uninterrupted.shadow().items():
        assert torch.equal(resumed.shadow()[name], value)


def test_resume_with_other_decay_or_other_tensors_raises() -> None:
    ema = ParameterEMA(0.9)
    ema.update(make_params(0))
    with pytest.raises(ValueError, match="decay"):
        ParameterEMA(0.99).load_state_dict(ema.state_dict())
    with pytest.raises(KeyError, match="lora_B"):
        ema.update({"layer.lora_A": make_params(1)["layer.lora_A"]})
    with pytest.raises(ValueError, match="decay"):
        ParameterEMA(1.5)


def test_swap_puts_the_average_in_and_restores_bit_exactly() -> None:
    live = {name: value.clone() for name, value in make_params(0).items()}
    ema = ParameterEMA(0.5)
    with ema.swapped(live):  # before the first update the teacher is the student: nothing changes
        assert all(torch.equal(live[n], v) for n, v in make_params(0).items())
    ema.update(make_params(1))
    ema.update(make_params(2))
    before = {name: value.clone() for name, value in live.items()}
    with ema.swapped(live):
        for name, value in live.items():
            assert torch.equal(value, ema.shadow()[name].to(value.dtype))
    for name, value in live.items():
        assert torch.equal(value, before[name])
