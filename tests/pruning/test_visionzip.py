"""VisionZip against a hand-worked example and a float64 brute-force dominant/contextual reference."""

from __future__ import annotations

import math

import pytest
import torch

from sparsectx.budget import tokens_to_keep
from sparsectx.pruning import select_tokens
from sparsectx.pruning.config import PrunerConfig
from sparsectx.pruning.visionzip import contextual_count, dominant_tokens, select_visionzip
from sparsectx.visual import ImageTokens


def run(image: ImageTokens, k: int, fraction: float):
    """Returns VisionZip's selection of k tokens, a fraction ``fraction`` of them contextual."""
    return select_visionzip(
        image, torch.zeros(1, image.embeds.shape[1]), k, torch.Generator(), contextual_fraction=fraction
    )


def reference(image: ImageTokens, k: int, fraction: float):
    """Returns (kept indices, {index: merged rows per feature}) by following spec 2.1 with plain lists."""
    n = image.num_tokens
    k_ctx = min(max(1, round(fraction * k)), k - 1)
    attention = image.attention_received.tolist()
    dominant = sorted(range(n), key=lambda i: (-attention[i], i))[: k - k_ctx]
    rest = [i for i in range(n) if i not in dominant]
    targets = rest[:: max(1, len(rest) // k_ctx)][:k_ctx] if k_ctx else []
    keys = image.keys.double().tolist()

    def cos(a: int, b: int) -> float:
        dot = sum(x * y for x, y in zip(keys[a], keys[b], strict=True))
        return dot / math.sqrt(sum(x * x for x in keys[a]) * sum(y * y for y in keys[b]))

    groups = {t: [] for t in targets}
    for r in rest if targets else []:  # with k_ctx = 0 the rest is simply dropped
        if r not in targets:
            groups[max(targets, key=lambda t: (cos(r, t), -t))].append(r)
    features = [image.embeds.double(), *(level.double() for level in image.deepstack)]
    rows = {}
    for i in sorted(dominant + targets):
        members = groups.get(i, [])
        rows[i] = [f[i] + (sum(f[m] for m in members) / len(members) if members else 0.0) for f in features]
    return sorted(dominant + targets), rows, dominant


def test_hand_worked_example():
    # N=6, k=4, f=1/2: k_ctx = 2, k_dom = 2 -> dominant {1, 3}; rest [0, 2, 4, 5], stride 2 -> targets
    # [0, 4]; token 2 (key ~ e1) joins target 0, token 5 (key ~ e1) joins target 0, target 4 stays itself.
    embeds = torch.tensor([[float(i), 10.0 * i] for i in range(6)])
    image = ImageTokens(
        embeds=embeds,
        grid=(1, 2, 3),
        attention_received=torch.tensor([0.1, 0.9, 0.2, 0.8, 0.3, 0.05]),
        keys=torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.9, 0.1], [1.0, 1.0], [0.0, 1.0], [0.8, 0.3]]),
        deepstack=(embeds * -2.0,),
    )
    selection = run(image, 4, 0.5)
    assert selection.indices.tolist() == [0, 1, 3, 4]
    expected = torch.tensor([[0 + (2 + 5) / 2, 0 + (20 + 50) / 2], [1.0, 10.0], [3.0, 30.0], [4.0, 40.0]])
    torch.testing.assert_close(selection.embeds, expected)
    torch.testing.assert_close(selection.deepstack[0], expected * -2.0)


def test_attention_ties_go_to_lowest_index():
    attention = torch.tensor([0.1, 0.3, 0.9, 0.2, 0.1, 0.9, 0.9, 0.0])
    assert dominant_tokens(attention, 2).tolist() == [2, 5]
    assert dominant_tokens(attention, 4).tolist() == [2, 5, 6, 1]
    # Through the operator: k=4, f=0.5 on N=8 gives k_ctx = 2, k_dom = 2, so 6 is not dominant.
    image = ImageTokens(torch.randn(8, 3), (1, 2, 4), attention, torch.randn(8, 2))
    keep, _, dominant = reference(image, 4, 0.5)
    assert dominant == [2, 5]
    assert run(image, 4, 0.5).indices.tolist() == keep


@pytest.mark.parametrize("fraction", [0.15625, 0.5, 0.9])
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("n", "k"), [(1, 1), (2, 1), (2, 2), (9, 3), (30, 6), (30, 15), (64, 64)])
def test_matches_brute_force_reference(fraction, seed, n, k, make_image):
    image = make_image(n, seed=seed, dtype=torch.float64)
    selection = run(image, k, fraction)
    keep, rows, dominant = reference(image, k, fraction)
    assert selection.indices.tolist() == keep
    assert len(dominant) == k - min(max(1, round(fraction * k)), k - 1)
    for pos, i in enumerate(keep):
        got = [selection.embeds[pos], *(level[pos] for level in selection.deepstack)]
        for g, want in zip(got, rows[i], strict=True):
            torch.testing.assert_close(g, want)
    for pos, i in enumerate(keep):
        if i in dominant:  # dominant tokens are never merged
            assert torch.equal(selection.embeds[pos], image.embeds[i])


def test_bf16_merge_accumulates_in_fp32(make_image):
    image = make_image(40, seed=1, dtype=torch.bfloat16)
    selection = run(image, 8, 0.5)
    keep, rows, _ = reference(image, 8, 0.5)
    assert selection.embeds.dtype == torch.bfloat16
    torch.testing.assert_close(selection.embeds.double(), torch.stack([rows[i][0] for i in keep]), atol=0.05, rtol=0.02)


@pytest.mark.parametrize(
    ("n", "budget", "split"),
    [
        # (k_dom, k_ctx); the fixed 5%-of-N rule gave 1/64, 65/65, 194/65 at N=1296 and 1/12, 13/13, 38/13
        # at the tiny model's N=256, 1/50 and 51/51 at N=1024: at a 5% budget one dominant token was left.
        (1296, 0.05, (33, 32)),
        (1296, 0.1, (65, 65)),
        (1296, 0.2, (129, 130)),
        (256, 0.05, (7, 6)),
        (256, 0.1, (13, 13)),
        (256, 0.2, (25, 26)),
        (1024, 0.05, (25, 26)),
        (1024, 0.1, (51, 51)),
    ],
)
def test_shipped_split_keeps_both_parts(n, budget, split, make_image, pruner_confs):
    fraction = pruner_confs["visionzip"]["params"]["contextual_fraction"]
    k = tokens_to_keep(budget, n)
    assert (k - contextual_count(k, fraction), contextual_count(k, fraction)) == split
    image = make_image(n, seed=3)
    selection = select_tokens(
        "visionzip", image, torch.zeros(1, 8), budget, torch.Generator(), {"contextual_fraction": fraction}
    )
    keep, _, dominant = reference(image, k, fraction)
    assert selection.indices.tolist() == keep and len(dominant) == split[0]


@pytest.mark.parametrize("k", range(2, 40))
def test_both_parts_at_every_k_of_shipped_config(k, make_image, pruner_confs):
    fraction = pruner_confs["visionzip"]["params"]["contextual_fraction"]
    image = make_image(80, seed=k)
    keep, _, dominant = reference(image, k, fraction)
    contextual = contextual_count(k, fraction)  # the operator's own split
    assert 0 < len(dominant) < k  # the spec's split (the reference's own list code) keeps both parts
    assert len(dominant) == k - contextual  # and the operator splits k the same way
    selection = select_visionzip(image, torch.zeros(1, 8), k, torch.Generator(), contextual_fraction=fraction)
    assert selection.indices.tolist() == keep


def test_old_contextual_share_key_fails_naming_it():
    with pytest.raises(KeyError, match=r"unknown pruner.params.contextual_share"):
        PrunerConfig(name="visionzip", stage="pre_llm", params={"contextual_share": 0.05})


@pytest.mark.parametrize("fraction", [-0.01, 0.0, 1.0, 1.5])
def test_contextual_fraction_outside_range_names_value(fraction, make_image):
    with pytest.raises(ValueError, match=rf"pruner.params.contextual_fraction={fraction!r} is outside \(0, 1\)"):
        run(make_image(10), 3, fraction)


def test_non_finite_attention_is_rejected(make_image):
    image = make_image(10)
    image.attention_received[3] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        run(image, 3, 0.05)
