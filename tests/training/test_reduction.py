"""Masked reductions: brute-force values, accumulation invariance (1×8 == 8×1 == 2×4), empty masks."""

from __future__ import annotations

import pytest
import torch

from sparsectx.training.reduction import (
    REDUCTIONS,
    constant_length,
    count_sequences,
    count_tokens,
    global_token_mean,
    reduce_loss,
    seq_mean_token_mean,
)

B, T = 8, 6


def make_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    features = torch.randn(B, T, 4, generator=gen)
    lengths = torch.tensor([6, 1, 3, 0, 5, 2, 6, 4])  # sequence 3 is empty (zero-length completion)
    mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
    weight = torch.randn(4, generator=gen, dtype=torch.float64).requires_grad_()
    return features.double(), mask, weight


def per_token_loss(features: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return (features @ weight).exp()  # any smooth per-position loss of the parameters


def test_seq_mean_token_mean_matches_brute_force() -> None:
    features, mask, weight = make_batch()
    loss = per_token_loss(features, weight).detach()
    want, used = 0.0, 0
    for i in range(B):
        valid = [float(loss[i, t]) for t in range(T) if mask[i, t]]
        if valid:
            want += sum(valid) / len(valid)
            used += 1
    want /= used
    got = seq_mean_token_mean(loss, mask, num_sequences=count_sequences([mask]))
    assert count_sequences([mask]) == 7
    assert abs(float(got) - want) < 1e-12


def test_global_token_mean_matches_brute_force() -> None:
    features, mask, weight = make_batch()
    loss = per_token_loss(features, weight).detach()
    valid = [float(loss[i, t]) for i in range(B) for t in range(T) if mask[i, t]]
    got = global_token_mean(loss, mask, num_tokens=count_tokens([mask]))
    assert count_tokens([mask]) == len(valid) == 27
    assert abs(float(got) - sum(valid) / len(valid)) < 1e-12


def accumulate(reduction: str, micro_batches: int) -> tuple[float, torch.Tensor]:
    """Returns the summed loss and gradient of one optimizer step split into ``micro_batches`` chunks."""
    features, mask, weight = make_batch()
    chunks = list(zip(features.chunk(micro_batches), mask.chunk(micro_batches), strict=True))
    masks = [m for _, m in chunks]
    total = 0.0
    for feats, m in chunks:
        loss = per_token_loss(feats, weight)
        if reduction == "seq_mean_token_mean":
            part = seq_mean_token_mean(loss, m, num_sequences=count_sequences(masks))
        else:
            part = global_token_mean(loss, m, num_tokens=count_tokens(masks))
        part.backward()
        total += float(part.detach())
    return total, weight.grad.clone()


@pytest.mark.parametrize("reduction", ["seq_mean_token_mean", "global_token_mean"])
def test_gradient_accumulation_1x8_equals_8x1(reduction: str) -> None:
    full_loss, full_grad = accumulate(reduction, 1)
    for splits in (8, 2):
        loss, grad = accumulate(reduction, splits)
        assert abs(loss - full_loss) < 1e-12
        torch.testing.assert_close(grad, full_grad, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("reduction", ["seq_mean_token_mean", "global_token_mean"])
def test_empty_mask_returns_zero_with_gradient_path(reduction: str) -> None:
    features, _, weight = make_batch()
    loss = per_token_loss(features, weight)
    empty = torch.zeros(B, T, dtype=torch.bool)
    if reduction == "seq_mean_token_mean":
        out = seq_mean_token_mean(loss, empty, num_sequences=0)
    else:
        out = global_token_mean(loss, empty, num_tokens=0)
    assert float(out.detach()) == 0.0 and out.requires_grad
    out.backward()
    assert weight.grad is not None and bool((weight.grad == 0).all())


def test_masked_out_nan_values_are_ignored() -> None:
    features, mask, weight = make_batch()
    nan = torch.tensor(float("nan"), dtype=torch.float64)
    for reduce in (seq_mean_token_mean, global_token_mean):
        loss = torch.where(mask, per_token_loss(features, weight), nan)
        if reduce is seq_mean_token_mean:
            out = seq_mean_token_mean(loss, mask, num_sequences=count_sequences([mask]))
        else:
            out = global_token_mean(loss, mask, num_tokens=count_tokens([mask]))
        out.backward()
        assert torch.isfinite(out) and bool(torch.isfinite(weight.grad).all())
        weight.grad = None


def test_invalid_counts_and_shapes_raise() -> None:
    loss = torch.ones(2, 3)
    mask = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="num_tokens"):
        global_token_mean(loss, mask, num_tokens=-1)
    with pytest.raises(ValueError, match="num_sequences"):
        seq_mean_token_mean(loss, mask, num_sequences=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mask"):
        global_token_mean(loss, mask.float(), num_tokens=6)


def test_reduce_loss_gives_each_registered_reduction_the_counts_its_signature_names() -> None:
    features, mask, weight = make_batch()
    loss = per_token_loss(features, weight).detach()
    sequences, tokens = count_sequences([mask]), count_tokens([mask])
    direct = {
        "seq_mean_token_mean": seq_mean_token_mean(loss, mask, num_sequences=sequences),
        "global_token_mean": global_token_mean(loss, mask, num_tokens=tokens),
        "constant_length": constant_length(loss, mask, num_sequences=sequences, max_length=T),
    }
    assert set(direct) <= set(REDUCTIONS.names())  # the shipped ones; a new one brings its own test
    assert len({float(value) for value in direct.values()}) == 3  # the lengths differ: each name reduces its own way
    for name, want in direct.items():
        got = reduce_loss(name, loss, mask, num_sequences=sequences, num_tokens=tokens, max_length=T)
        assert torch.equal(got, want), name
