"""Divergences against float64 brute force, TRL GKD's definition, and their structural edge cases."""

from __future__ import annotations

import math

import pytest
import torch

from sparsectx.training import DIVERGENCES
from sparsectx.training.divergences import forward_kl, jsd, reverse_kl, topk_support_logprobs
from sparsectx.training.reduction import count_tokens, global_token_mean

from .reference import per_position64, probs64, trl_gkd_jsd_loss64

B, T, V = 3, 5, 37
CASES = [
    ("forward_kl", 0.0),
    ("reverse_kl", 1.0),
    ("jsd", 0.0),
    ("jsd", 0.1),
    ("jsd", 0.5),
    ("jsd", 0.9),
    ("jsd", 1.0),
]


Inputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def make_inputs(seed: int, scale: float = 3.0) -> Inputs:
    gen = torch.Generator().manual_seed(seed)
    student = (scale * torch.randn(B, T, V, generator=gen)).requires_grad_()
    teacher = scale * torch.randn(B, T, V, generator=gen)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 3:] = False  # a partly masked row
    mask[2, :] = False  # a fully masked row
    sampled = torch.randint(0, V, (B, T), generator=gen)
    return student, teacher, mask, sampled


def run(kind: str, beta: float, **kwargs: object) -> torch.Tensor:
    fn = DIVERGENCES.get(kind)
    if kind == "jsd":
        kwargs["beta"] = beta
    return fn(**kwargs)


@pytest.mark.parametrize(("kind", "beta"), CASES)
@pytest.mark.parametrize("top_k", [None, 1, 4])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_matches_float64_reference_values_and_gradients(
    kind: str, beta: float, top_k: int | None, temperature: float
) -> None:
    student, teacher, mask, sampled = make_inputs(seed=1)
    got = run(
        kind,
        beta,
        student_logits=student,
        teacher_logits=teacher,
        mask=mask,
        sampled_ids=sampled,
        top_k=top_k,
        chunk_size=4,
        temperature=temperature,
    )
    student64 = student.detach().double().requires_grad_()
    want = per_position64(kind, student64, teacher.double(), mask, sampled, beta, top_k, temperature)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want.detach(), atol=2e-5, rtol=1e-4)

    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(student.grad.double(), student64.grad, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("top_k", [None, 3])
def test_jsd_endpoints_are_forward_and_reverse_kl(top_k: int | None) -> None:
    student, teacher, mask, sampled = make_inputs(seed=2)
    common = dict(student_logits=student, teacher_logits=teacher, mask=mask, sampled_ids=sampled, top_k=top_k)
    common.update(chunk_size=2, temperature=1.0)
    torch.testing.assert_close(jsd(beta=0.0, **common), forward_kl(**common), atol=0, rtol=0)
    torch.testing.assert_close(jsd(beta=1.0, **common), reverse_kl(**common), atol=0, rtol=0)
    # The raw mixture formula vanishes as β → 0; the endpoint is special-cased, not a limit.
    assert jsd(beta=1e-4, **common).sum() < 0.01 * forward_kl(**common).sum()


@pytest.mark.parametrize(("kind", "beta"), CASES)
@pytest.mark.parametrize("top_k", [V, V + 10])
def test_topk_with_k_equal_vocab_equals_full_vocab(kind: str, beta: float, top_k: int) -> None:
    student, teacher, mask, sampled = make_inputs(seed=3)
    common = dict(student_logits=student, teacher_logits=teacher, mask=mask, sampled_ids=sampled)
    full = run(kind, beta, top_k=None, chunk_size=3, temperature=1.0, **common)
    topk = run(kind, beta, top_k=top_k, chunk_size=3, temperature=1.0, **common)
    torch.testing.assert_close(topk, full, atol=1e-6, rtol=1e-5)


def test_tail_bucket_and_support_mass_sum_to_one() -> None:
    gen = torch.Generator().manual_seed(4)
    student = 3 * torch.randn(6, V, generator=gen)
    teacher = 3 * torch.randn(6, V, generator=gen)
    sampled = torch.randint(0, V, (6,), generator=gen)
    for k in (1, 2, 5, V):
        _, lp, lq, valid = topk_support_logprobs(student, teacher, sampled, k, 1.0)
        for ext in (lp, lq):
            mass = torch.where(valid, ext.double().exp(), 0.0).sum(-1)
            torch.testing.assert_close(mass, torch.ones(6, dtype=torch.float64), atol=1e-6, rtol=0)
        if k == V:  # the support is the whole vocabulary: no tail category
            assert not bool(valid[:, -1].any())
        elif 2 * k + 1 < V:  # the support cannot cover the vocabulary: the tail always exists
            assert bool(valid[:, -1].all())


def test_support_is_union_of_topk_and_sampled_token_deduplicated() -> None:
    gen = torch.Generator().manual_seed(5)
    student = torch.randn(4, V, generator=gen)
    teacher = student.clone()
    teacher[1] = torch.randn(V, generator=gen)
    sampled = torch.tensor([int(student[0].argmax()), 0, 1, 2])
    support, _, _, valid = topk_support_logprobs(student, teacher, sampled, 3, 1.0)
    for i in range(4):
        got = set(support[i][valid[i, :-1]].tolist())
        want = set(student[i].topk(3).indices.tolist()) | set(teacher[i].topk(3).indices.tolist())
        want.add(int(sampled[i]))
        assert got == want
        assert int(valid[i, :-1].sum()) == len(want)  # duplicates are marked invalid, not counted twice
    assert int(valid[0, :-1].sum()) == 3  # identical teacher/student and sampled = argmax: just 3 ids


def test_tiny_tail_is_accurate_where_one_minus_sum_would_cancel() -> None:
    logits = torch.zeros(1, V)
    logits[0, :3] = 30.0  # the other 34 tokens share about 34·e^-30 ≈ 3e-12 of the mass
    _, lp, _, valid = topk_support_logprobs(logits, logits, None, 3, 1.0)
    assert bool(valid[0, -1])
    p = probs64(logits[0], 1.0)
    want = math.log(float(p[3:].sum()))  # direct float64 sum of the complement
    assert abs(float(lp[0, -1]) - want) < 1e-4


def test_fully_masked_batch_returns_zero_with_gradient_path() -> None:
    student, teacher, _, sampled = make_inputs(seed=6)
    mask = torch.zeros(B, T, dtype=torch.bool)
    for top_k in (None, 2):
        out = jsd(
            student_logits=student,
            teacher_logits=teacher,
            mask=mask,
            sampled_ids=sampled,
            beta=0.5,
            top_k=top_k,
            chunk_size=2,
            temperature=1.0,
        )
        assert out.shape == (B, T) and bool((out == 0).all())
        loss = global_token_mean(out, mask, num_tokens=0)
        assert loss.requires_grad
        loss.backward()
        assert student.grad is not None and bool((student.grad == 0).all())


def test_masked_positions_are_zero_and_ignore_garbage_logits() -> None:
    student, teacher, mask, sampled = make_inputs(seed=7)
    with torch.no_grad():
        student[~mask] = float("nan")  # padding logits are never read
    out = forward_kl(
        student_logits=student,
        teacher_logits=teacher,
        mask=mask,
        sampled_ids=sampled,
        top_k=None,
        chunk_size=3,
        temperature=1.0,
    )
    assert bool(torch.isfinite(out).all()) and bool((out[~mask] == 0).all()) and bool((out[mask] > 0).all())


@pytest.mark.parametrize("top_k", [None, 3])
def test_chunk_size_does_not_change_values_or_gradients(top_k: int | None) -> None:
    results = []
    for chunk in (1, 3, 1000):
        student, teacher, mask, sampled = make_inputs(seed=8)
        out = jsd(
            student_logits=student,
            teacher_logits=teacher,
            mask=mask,
            sampled_ids=sampled,
            beta=0.5,
            top_k=top_k,
            chunk_size=chunk,
            temperature=1.0,
        )
        (out * torch.arange(1.0, T + 1)).sum().backward()
        results.append((out.detach(), student.grad))
    for out, grad in results[1:]:
        torch.testing.assert_close(out, results[0][0], atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(grad, results[0][1], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize(("kind", "beta"), CASES)
@pytest.mark.parametrize("top_k", [None, 3])
def test_gradient_reaches_only_the_student(kind: str, beta: float, top_k: int | None) -> None:
    student, teacher, mask, sampled = make_inputs(seed=9)
    teacher.requires_grad_()
    out = run(
        kind,
        beta,
        student_logits=student,
        teacher_logits=teacher,
        mask=mask,
        sampled_ids=sampled,
        top_k=top_k,
        chunk_size=2,
        temperature=1.0,
    )
    out.sum().backward()
    assert teacher.grad is None
    assert student.grad is not None and float(student.grad.abs().sum()) > 0
    assert bool((student.grad[~mask] == 0).all())


def test_forward_kl_gradient_is_p_minus_q() -> None:
    student, teacher, mask, _ = make_inputs(seed=10)
    out = forward_kl(
        student_logits=student,
        teacher_logits=teacher,
        mask=mask,
        sampled_ids=None,
        top_k=None,
        chunk_size=4,
        temperature=1.0,
    )
    out.sum().backward()
    want = (probs64(student.detach(), 1.0) - probs64(teacher, 1.0)) * mask.unsqueeze(-1)
    torch.testing.assert_close(student.grad.double(), want, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("beta", [0.0, 0.25, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_agrees_with_trl_gkd_generalized_jsd_loss(beta: float, temperature: float) -> None:
    """Where the definitions coincide: full vocabulary, same T, batchmean over one batch's labelled tokens."""
    student, teacher, mask, _ = make_inputs(seed=11)
    labels = torch.where(mask, torch.ones(B, T, dtype=torch.long), torch.full((B, T), -100))
    per_token = jsd(
        student_logits=student,
        teacher_logits=teacher,
        mask=mask,
        sampled_ids=None,
        beta=beta,
        top_k=None,
        chunk_size=4,
        temperature=temperature,
    )
    ours = global_token_mean(per_token, mask, num_tokens=count_tokens([mask]))
    trl = trl_gkd_jsd_loss64(student.detach(), teacher, labels, beta, temperature)
    torch.testing.assert_close(ours.double(), trl, atol=1e-6, rtol=1e-5)


def test_jsd_half_properties() -> None:
    student, teacher, mask, _ = make_inputs(seed=12, scale=8.0)
    common = dict(mask=mask, sampled_ids=None, beta=0.5, top_k=None, chunk_size=4, temperature=1.0)
    ab = jsd(student_logits=student, teacher_logits=teacher, **common)
    ba = jsd(student_logits=teacher, teacher_logits=student.detach(), **common)
    same = jsd(student_logits=student, teacher_logits=student.detach(), **common)
    torch.testing.assert_close(ab, ba, atol=1e-6, rtol=1e-6)
    assert float(ab.detach().max()) <= math.log(2) + 1e-6
    assert float(same.detach().abs().max()) < 1e-6


def test_bf16_logits_are_upcast_to_fp32() -> None:
    student, teacher, mask, sampled = make_inputs(seed=13)
    s16 = student.detach().bfloat16().requires_grad_()
    t16 = teacher.bfloat16()
    out = jsd(
        student_logits=s16,
        teacher_logits=t16,
        mask=mask,
        sampled_ids=sampled,
        beta=0.5,
        top_k=3,
        chunk_size=2,
        temperature=1.0,
    )
    want = per_position64("jsd", s16.detach().double(), t16.double(), mask, sampled, 0.5, 3, 1.0)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=1e-4)
    out.sum().backward()
    assert s16.grad is not None and s16.grad.dtype == torch.bfloat16


def test_no_grad_path_matches_grad_path() -> None:
    student, teacher, mask, sampled = make_inputs(seed=14)
    common = dict(teacher_logits=teacher, mask=mask, sampled_ids=sampled, beta=0.3, top_k=2, chunk_size=2)
    with_grad = jsd(student_logits=student, temperature=1.0, **common)
    with torch.no_grad():
        without = jsd(student_logits=student, temperature=1.0, **common)
    torch.testing.assert_close(with_grad.detach(), without, atol=0, rtol=0)


def test_registry_keys_and_unknown_name() -> None:
    assert DIVERGENCES.names() == ["forward_kl", "jsd", "reverse_kl"]
    with pytest.raises(KeyError, match="forward_kl"):
        DIVERGENCES.get("foward_kl")


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ({"beta": 1.5}, "beta"),
        ({"beta": -0.1}, "beta"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"top_k": 0}, "top_k"),
        ({"temperature": 0.0}, "temperature"),
        ({"mask": torch.ones(B, T)}, "mask"),
        ({"teacher_logits": torch.randn(B, T, V + 1)}, "teacher_logits"),
    ],
)
def test_invalid_arguments_raise(override: dict[str, object], match: str) -> None:
    student, teacher, mask, sampled = make_inputs(seed=15)
    kwargs: dict[str, object] = dict(
        student_logits=student,
        teacher_logits=teacher,
        mask=mask,
        sampled_ids=sampled,
        beta=0.5,
        top_k=None,
        chunk_size=2,
        temperature=1.0,
    )
    kwargs.update(override)
    with pytest.raises(ValueError, match=match):
        jsd(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("top_k", [None, 3])
def test_backward_keeps_no_fp32_vocabulary_tensor(top_k: int | None) -> None:
    """Chunks are checkpointed: autograd keeps only the bf16 input chunks, no fp32 (n, V) intermediate."""
    gen = torch.Generator().manual_seed(16)
    student = torch.randn(4, 16, 300, generator=gen).bfloat16().requires_grad_()
    teacher = torch.randn(4, 16, 300, generator=gen).bfloat16()
    mask = torch.ones(4, 16, dtype=torch.bool)
    saved: list[torch.Tensor] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = jsd(
            student_logits=student,
            teacher_logits=teacher,
            mask=mask,
            sampled_ids=None,
            beta=0.5,
            top_k=top_k,
            chunk_size=8,
            temperature=1.0,
        )
    vocab_sized = [t for t in saved if t.dim() == 2 and t.shape[-1] == 300]
    assert vocab_sized and all(t.dtype == torch.bfloat16 and t.shape[0] <= 8 for t in vocab_sized)
    out.sum().backward()
    assert student.grad is not None
