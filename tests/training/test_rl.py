"""GRPO / GSPO / DAPO parts against float64 brute force written from TRL's ``GRPOTrainer._compute_loss`` rules.

The references loop over sequences and tokens in float64 with plain Python arithmetic and follow TRL's
conventions (read, not copied): ``grpo`` = mean over sequences of each sequence's token mean, ``bnpo`` =
Σ tokens / tokens of the (micro-)batch, ``dr_grpo`` = Σ tokens / (sequences · max_completion_length),
``dapo`` = Σ tokens / the global token count; ``token`` level ratio exp(logp − old) per token, ``sequence``
level exp(mean_t(logp − old)) per sequence; loss −min(wA, clip(w, 1−ε_low, 1+ε_high)A) + β·k3.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from sparsectx.context import build_context
from sparsectx.data import Item
from sparsectx.generation import response_logits
from sparsectx.training import groups, loop, reduction, steps, update
from sparsectx.training.checkpoint import read_meta
from sparsectx.training.config import load_train_config
from sparsectx.training.groups import Group, refill
from sparsectx.training.loop import run
from sparsectx.training.prefetch import HostPrefetch
from sparsectx.training.rewards import correct_format_reward
from sparsectx.training.rl import clipped_surrogate, group_advantages, k3_kl, overlong_penalty, token_logprobs
from sparsectx.training.student import mode

from .test_loop_support import compose_train, shared_env, train_overrides
from .test_resume import Killed, final_weights, kill_during_update

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
LEVELS = ("token", "sequence")
EPS_LOW, EPS_HIGH, BETA, MAX_LEN = 0.2, 0.28, 0.04, 9


def inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    """Returns 6 sequences of up to 7 positions: log-probs (ratios far from 1), advantages, masks, lengths."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([7, 3, 5, 1, 6, 4])
    mask = torch.arange(7)[None, :] < lengths[:, None]
    logp = -torch.rand(6, 7, generator=g, dtype=torch.float64) * 3
    old = logp + 0.4 * torch.randn(6, 7, generator=g, dtype=torch.float64)
    ref = logp + 0.3 * torch.randn(6, 7, generator=g, dtype=torch.float64)
    adv = torch.randn(6, generator=g, dtype=torch.float64)
    return {"logp": logp, "old": old, "ref": ref, "adv": adv, "mask": mask}


def brute_force(x: dict[str, torch.Tensor], loss_type: str, level: str, rows: list[list[int]]) -> float:
    """Returns TRL's loss for micro-batches ``rows`` (lists of sequence indices), summed as gradient
    accumulation does (grpo/bnpo/dr_grpo divided by the number of micro-batches, dapo by global tokens)."""
    logp, old, ref, adv, mask = (x[k].tolist() for k in ("logp", "old", "ref", "adv", "mask"))
    per_seq_tokens = []
    for i in range(len(adv)):
        valid = [t for t in range(len(mask[i])) if mask[i][t]]
        seq_w = math.exp(sum(logp[i][t] - old[i][t] for t in valid) / max(len(valid), 1))
        losses = []
        for t in valid:
            w = seq_w if level == "sequence" else math.exp(logp[i][t] - old[i][t])
            bounded = min(max(w, 1 - EPS_LOW), 1 + EPS_HIGH)
            delta = ref[i][t] - logp[i][t]
            losses.append(-min(w * adv[i], bounded * adv[i]) + BETA * (math.exp(delta) - delta - 1))
        per_seq_tokens.append(losses)
    global_tokens = sum(len(s) for s in per_seq_tokens)
    total = 0.0
    for part in rows:
        seqs = [per_seq_tokens[i] for i in part]
        if loss_type == "grpo":
            value = sum(sum(s) / max(len(s), 1) for s in seqs) / len(seqs)
        elif loss_type == "bnpo":
            value = sum(sum(s) for s in seqs) / max(sum(len(s) for s in seqs), 1)
        elif loss_type == "dr_grpo":
            value = sum(sum(s) for s in seqs) / (len(seqs) * MAX_LEN)
        else:
            total += sum(sum(s) for s in seqs) / global_tokens
            continue
        total += value / len(rows)
    return total


def batched(x: dict[str, torch.Tensor], loss_type: str, level: str, rows: list[list[int]]) -> torch.Tensor:
    """Returns the production path's step loss: surrogate + β·k3 per micro-batch, whole-step normalisers."""
    tokens, sequences = int(x["mask"].sum()), int(x["mask"].any(-1).sum())
    total = torch.zeros((), dtype=torch.float64)
    for part in rows:
        idx = torch.tensor(part)
        logp, mask = x["logp"][idx], x["mask"][idx]
        per_token, _ = clipped_surrogate(
            logp, x["old"][idx], x["adv"][idx], mask, epsilon_low=EPS_LOW, epsilon_high=EPS_HIGH, level=level
        )
        per_token = per_token + BETA * k3_kl(logp, x["ref"][idx])
        if loss_type == "grpo":
            total = total + reduction.seq_mean_token_mean(per_token, mask, num_sequences=sequences)
        elif loss_type == "dr_grpo":
            total = total + reduction.constant_length(per_token, mask, num_sequences=sequences, max_length=MAX_LEN)
        else:  # dapo; bnpo with one micro-batch
            total = total + reduction.global_token_mean(per_token, mask, num_tokens=tokens)
    return total


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_surrogate_and_aggregation_match_trl_brute_force(loss_type: str, level: str) -> None:
    x = inputs()
    splits = [[[0, 1, 2, 3, 4, 5]]] if loss_type == "bnpo" else [[[0, 1, 2, 3, 4, 5]], [[0, 1, 2], [3, 4, 5]]]
    for rows in splits:  # one micro-batch, and 2 equal micro-batches of gradient accumulation
        expected = brute_force(x, loss_type, level, rows)
        assert float(batched(x, loss_type, level, rows)) == pytest.approx(expected, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("level", LEVELS)
def test_gradient_matches_brute_force(level: str) -> None:
    x = inputs(1)
    logp = x["logp"].clone().requires_grad_(True)
    batched({**x, "logp": logp}, "dapo", level, [[0, 1, 2, 3, 4, 5]]).backward()
    ref_grad = torch.zeros_like(logp)
    h = 1e-6
    for i, t in x["mask"].nonzero().tolist():  # central differences of the float64 brute force
        up, down = x["logp"].clone(), x["logp"].clone()
        up[i, t] += h
        down[i, t] -= h
        f = lambda v: brute_force({**x, "logp": v}, "dapo", level, [[0, 1, 2, 3, 4, 5]])  # noqa: E731
        ref_grad[i, t] = (f(up) - f(down)) / (2 * h)
    assert torch.allclose(logp.grad, ref_grad, atol=1e-7)


def test_clipped_positions_are_trls_region() -> None:
    x = inputs(2)
    _, clipped = clipped_surrogate(
        x["logp"], x["old"], x["adv"], x["mask"], epsilon_low=EPS_LOW, epsilon_high=EPS_HIGH, level="token"
    )
    for i, t in x["mask"].nonzero().tolist():
        w, a = math.exp(float(x["logp"][i, t] - x["old"][i, t])), float(x["adv"][i])
        assert bool(clipped[i, t]) == ((w < 1 - EPS_LOW and a < 0) or (w > 1 + EPS_HIGH and a > 0))
    assert not clipped[~x["mask"]].any() and 0 < int(clipped.sum()) < int(x["mask"].sum())


def test_on_policy_grpo_and_gspo_share_one_gradient_and_part_off_policy() -> None:
    """At μ = 1 every ratio is exactly 1, so with the per-rollout token mean (TRL's loss_type="grpo") the
    token-level and sequence-level surrogates have the same gradient, −A_i · mean_t ∇log π_t, by calculus
    (make study's GRPO and GSPO rows are identical for that reason); off policy the two must differ."""
    x = inputs(4)

    def grad(level: str, old: torch.Tensor) -> torch.Tensor:
        logp = x["logp"].clone().requires_grad_(True)
        per_token, _ = clipped_surrogate(
            logp, old, x["adv"], x["mask"], epsilon_low=EPS_LOW, epsilon_high=EPS_HIGH, level=level
        )
        reduction.seq_mean_token_mean(per_token, x["mask"], num_sequences=6).backward()
        return logp.grad

    lengths = x["mask"].sum(-1, keepdim=True).to(torch.float64)
    expected = torch.where(x["mask"], -x["adv"][:, None] / lengths / 6, torch.zeros((), dtype=torch.float64))
    on_policy = x["logp"].detach()
    for level in LEVELS:
        assert torch.allclose(grad(level, on_policy), expected, rtol=0, atol=1e-15)
    assert not torch.allclose(grad("token", x["old"]), grad("sequence", x["old"]), atol=1e-3)


@pytest.mark.parametrize("std", ["population", "sample"])
@pytest.mark.parametrize("scale", [True, False])
def test_group_advantages_match_brute_force(std: str, scale: bool) -> None:
    rewards = torch.tensor([1.0, 0.0, 0.1, 1.1, 0.5, 0.5, 0.5, 0.5], dtype=torch.float64)
    got = group_advantages(rewards, 4, scale=scale, std=std)
    for g in range(2):
        r = rewards[4 * g : 4 * g + 4].tolist()
        mean = sum(r) / 4
        spread = math.sqrt(sum((v - mean) ** 2 for v in r) / (4 if std == "population" else 3))
        for k, v in enumerate(r):
            want = (v - mean) / (spread + 1e-4) if scale else v - mean
            assert float(got[4 * g + k]) == pytest.approx(want, abs=1e-12)
    assert torch.equal(got[4:], torch.zeros(4, dtype=torch.float64))  # zero variance: no signal


def test_a_group_with_equal_rewards_contributes_zero_gradient() -> None:
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(4, 5, 11, generator=g, requires_grad=True)
    ids = torch.randint(11, (4, 5), generator=g)
    mask = torch.ones(4, 5, dtype=torch.bool)
    adv = group_advantages(torch.tensor([1.0, 0.0, 1.1, 1.1]), 2, scale=True, std="population")
    logp = token_logprobs(logits, ids, 1.2, 3)
    per_token, _ = clipped_surrogate(logp, logp.detach(), adv, mask, epsilon_low=0.2, epsilon_high=0.2, level="token")
    reduction.seq_mean_token_mean(per_token, mask, num_sequences=4).backward()
    assert torch.count_nonzero(logits.grad[2:]) == 0 and torch.count_nonzero(logits.grad[:2]) > 0


def test_token_logprobs_match_log_softmax() -> None:
    g = torch.Generator().manual_seed(4)
    logits, ids = torch.randn(3, 4, 13, generator=g), torch.randint(13, (3, 4), generator=g)
    want = torch.log_softmax(logits.double() / 0.7, -1).gather(-1, ids[..., None]).squeeze(-1)
    assert torch.allclose(token_logprobs(logits, ids, 0.7, 5).double(), want, atol=1e-5)


def test_overlong_penalty_is_daopos_piecewise_rule() -> None:
    got = overlong_penalty(torch.tensor([10, 16, 18, 20]), 20, 0.2)  # L_max 20, L_cache 4
    assert got.tolist() == pytest.approx([0.0, 0.0, -0.5, -1.0])


def _group(rewards: list[float] | None, name: str) -> Group:
    tensor = None if rewards is None else torch.tensor(rewards, dtype=torch.float64)
    return Group(SimpleNamespace(name=name), SimpleNamespace(), tensor)


def test_dynamic_sampling_fills_the_batch_with_informative_groups_only() -> None:
    pool = iter([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.1, 0.0]])
    rollout = lambda contexts: [_group(next(pool), f"new{n}") for n in range(contexts[0])]  # noqa: E731
    start = [_group([0.0, 0.0], "a"), _group([0.0, 1.0], "b"), _group([1.0, 1.0], "c")]
    groups, drawn = refill(start, rollout, lambda batch: batch, lambda count, round_: count, max_draws=5)
    assert len(groups) == 3 and all(g.informative for g in groups)
    assert groups[1].context.name == "b" and drawn == 4  # the rounds drew 2, 1 and 1 prompts


def test_dynamic_sampling_stops_after_max_draws_and_leaves_the_slot_uninformative() -> None:
    rollout = lambda contexts: [_group([0.0, 0.0], "flat") for _ in range(contexts[0])]  # noqa: E731
    groups, drawn = refill([_group([1.0, 1.0], "a")], rollout, lambda b: b, lambda c, r: c, max_draws=2)
    assert drawn == 2 and not groups[0].informative  # the caller masks it out of the loss


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("method.rl.group_size=1", "method.rl.group_size"),
        ("method.rl.epsilon_low=0.0", "method.rl.epsilon_low"),
        ("method.rl.num_iterations=0", "method.rl.num_iterations"),
        ("method.rl.beta=0.1", "method.teacher.kind"),
        ("method.rollout.do_sample=false", "method.rollout.do_sample"),
    ],
)
def test_bad_settings_are_config_errors_naming_the_key(override: str, key: str) -> None:
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        load_train_config(compose_train(["method=grpo", override]))


def _item(answer: str, options: dict[str, str] | None = None) -> Item:
    return Item(
        index=3,
        image_bytes=b"",
        question="q",
        options=options or {},
        answer=answer,
        category="",
        family="detail",
        subset="",
        trace="",
        scene="{}",
        extra={},
    )


TAGGED = "<think>look</think><answer>{}</answer>"


@pytest.mark.parametrize(
    ("text", "item", "reward"),
    [
        (TAGGED.format("Red."), _item("red"), 1.1),  # exact_match normalisation, format bonus
        (TAGGED.format("blue"), _item("red"), 0.1),  # wrong answer, right format
        ("the answer is red", _item("red"), 0.0),  # no strict <answer>: not correct, no format
        ("<answer>red</answer>", _item("red"), 1.0),  # correct without the think block
        (TAGGED.format("(B) a dog"), _item("B", {"A": "a cat", "B": "a dog"}), 1.1),  # mcq option matching
        (TAGGED.format("a cat"), _item("B", {"A": "a cat", "B": "a dog"}), 0.1),
        (TAGGED.format("red"), _item(""), None),  # no reference: unscorable, never a silent 0
        (TAGGED.format("C"), _item("C", {"A": "a cat", "B": "a dog"}), None),  # letter not an option
    ],
)
def test_correct_format_reward_uses_the_benchmark_extraction_and_scorers(text, item, reward) -> None:  # noqa: ANN001
    got = correct_format_reward([text], [item], correct_weight=1.0, format_weight=0.1)[0]
    assert got == (None if reward is None else pytest.approx(reward))


def _rl_cfg(**changes: object) -> SimpleNamespace:
    settings = {"overlong_cache_fraction": None, **changes}
    rl = SimpleNamespace(reward=SimpleNamespace(name="correct_format", params={}), **settings)
    return SimpleNamespace(method=SimpleNamespace(rl=rl), max_new_tokens=8)


def test_a_non_finite_reward_is_an_error_naming_the_item(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groups.REWARDS, "get", lambda name: lambda texts, items: [1.0, math.nan])
    context = SimpleNamespace(items=[_item("red")])
    prefix = SimpleNamespace(texts=["a", "b"], tokens=[torch.ones(2), torch.ones(3)])
    with pytest.raises(ValueError, match="training item 3"):
        groups.group_rewards(_rl_cfg(), prefix, context)


def test_the_overlong_penalty_is_added_to_the_reward(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groups.REWARDS, "get", lambda name: lambda texts, items: [1.0, 1.0])
    context = SimpleNamespace(items=[_item("red")])
    prefix = SimpleNamespace(texts=["a", "b"], tokens=[torch.ones(4), torch.ones(8)])
    got = groups.group_rewards(_rl_cfg(overlong_cache_fraction=0.5), prefix, context)
    assert got.tolist() == [1.0, 0.0]  # L_max 8, L_cache 4: length 8 gets -1


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


def _parity_rewards(cfg, prefix, context):  # noqa: ANN001, ANN202
    """A reward that varies inside a group: the parity of each rollout's token sum."""
    return torch.tensor([float(int(t.sum()) % 2) for t in prefix.tokens], dtype=torch.float64)


# The tiny model's 5-token rollouts never stop, so DAPO's overlong filter would mask all of them (tested below).
@pytest.mark.parametrize("method", ["grpo", "gspo", "dapo"])
def test_one_step_with_informative_groups_updates_the_student(method, tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(groups, "group_rewards", _parity_rewards)
    overrides = [
        *train_overrides(tiny_env, tmp_path),
        f"method={method}",
        "steps=1",
        "method.rl.group_size=4",
        *(["method.rl.mask_truncated=false"] if method == "dapo" else []),
    ]
    metrics = run(compose_train(overrides)).metrics
    assert metrics["rl/informative_group_fraction"] == 1.0 and metrics["rl/dropped_groups"] == 0.0
    assert metrics["train/selected_fraction"] > 0.0 and metrics["train/grad_norm"] > 0.0
    assert 0.0 < metrics["rl/reward_mean"] < 1.0 and metrics["rl/clip_fraction"] == 0.0  # on-policy: ratio 1


def test_dapos_overlong_filter_leaves_truncated_rollouts_out_of_the_loss(tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(groups, "group_rewards", _parity_rewards)
    overrides = [*train_overrides(tiny_env, tmp_path), "method=dapo", "steps=1", "method.rl.group_size=4"]
    metrics = run(compose_train(overrides)).metrics
    assert metrics["rollout/stop_rate"] == 0.0 and metrics["train/selected_fraction"] == 0.0
    assert metrics["train/loss"] == 0.0


def _brute_logprobs(student, mb, temperature: float) -> torch.Tensor:  # noqa: ANN001
    """(B, T) float64 log-softmax(logits / T) of the rollout ids under the student's CURRENT weights."""
    with torch.no_grad(), mode(student.model, training=False):
        batch = build_context(student.adapter, mb.encoded, mb.selections, mb.prefix.tokens)
        logits, _ = response_logits(student.adapter, batch)
    logp = torch.log_softmax(logits.double() / temperature, dim=-1)
    return logp.gather(-1, mb.ids.unsqueeze(-1)).squeeze(-1)


def _brute_surrogate(new, old, adv, mask, eps_low: float, eps_high: float, level: str) -> torch.Tensor:  # noqa: ANN001
    """(B, T) −min(wA, clip(w)A) in float64, w per token or GSPO's exp(mean_t(new − old)) per sequence."""
    out = torch.zeros_like(new)
    for i in range(new.shape[0]):
        rows = [t for t in range(new.shape[1]) if mask[i, t]]
        seq = math.exp(sum(float(new[i, t] - old[i, t]) for t in rows) / max(len(rows), 1))
        for t in range(new.shape[1]):
            w = seq if level == "sequence" else math.exp(float(new[i, t] - old[i, t]))
            a = float(adv[i])
            out[i, t] = -min(w * a, min(max(w, 1 - eps_low), 1 + eps_high) * a)
    return out


def _spy_iterations(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:  # noqa: ANN001
    """Records per micro_loss call: step, positions, ids, brute-force log-probs, and the surrogate's inputs."""
    seen: dict[str, list] = {"calls": [], "generated": []}
    step = {"now": -1}
    real_accumulate, real_micro_loss = loop.accumulate_gradients, update.micro_loss
    real_surrogate, real_prefixes = steps.clipped_surrogate, groups.step_prefixes

    def accumulate(trainer):  # noqa: ANN001, ANN202
        step["now"] = trainer.step
        return real_accumulate(trainer)

    def micro_loss(cfg, student, mb, *args, **kwargs):  # noqa: ANN001, ANN202
        seen["calls"].append(
            {
                "step": step["now"],
                "positions": list(mb.positions),
                "ids": mb.ids.clone(),
                "brute": _brute_logprobs(student, mb, cfg.method.rollout.temperature),
                "adv": mb.group.advantages.clone(),
                "old_before": mb.old_logp,
            }
        )
        return real_micro_loss(cfg, student, mb, *args, **kwargs)

    def surrogate(logp, old_logp, advantages, mask, **kwargs):  # noqa: ANN001, ANN202
        loss, clipped = real_surrogate(logp, old_logp, advantages, mask, **kwargs)
        seen["calls"][-1].update(
            logp=logp.detach().clone(),
            old=old_logp.clone(),
            mask=mask.clone(),
            loss=loss.detach().clone(),
            clipped=clipped.clone(),
        )
        return loss, clipped

    def prefixes(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        seen["generated"].append(step["now"])
        return real_prefixes(*args, **kwargs)

    monkeypatch.setattr(loop, "accumulate_gradients", accumulate)
    monkeypatch.setattr(update, "micro_loss", micro_loss)
    monkeypatch.setattr(steps, "clipped_surrogate", surrogate)
    monkeypatch.setattr(groups, "step_prefixes", prefixes)
    real_take = HostPrefetch.take

    def take(self, cfg, processor, batch):  # noqa: ANN001, ANN202
        seen.setdefault("prefetched", []).append((step["now"], batch[1], tuple(batch[1]) in self._pending))
        return real_take(self, cfg, processor, batch)

    monkeypatch.setattr(HostPrefetch, "take", take)
    return seen


@pytest.mark.parametrize(("method", "eps"), [("grpo", (0.2, 0.2)), ("gspo", (3e-4, 4e-4))])
def test_num_iterations_2_reuses_the_rollouts_against_the_sampling_policys_logprobs(
    method, eps, tiny_env, tmp_path, monkeypatch
) -> None:  # noqa: ANN001
    monkeypatch.setattr(groups, "group_rewards", _parity_rewards)
    seen = _spy_iterations(monkeypatch)
    overrides = [
        *train_overrides(tiny_env, tmp_path),
        f"method={method}",
        "steps=3",
        "method.rl.group_size=4",
        "method.rl.num_iterations=2",
        "method.optim.lr=0.05",
    ]
    result = run(compose_train(overrides))
    assert (result.steps, result.samples_seen) == (3, 4)  # step 2 (0-based 1) takes no new prompts
    assert seen["generated"] == [0, 2]  # rollouts sampled on steps 0 and 2 only
    # the reuse step takes no items; step 2 gets the next positions, prefetched during step 0
    assert seen["prefetched"] == [(0, [0], False), (0, [1], False), (2, [2], True), (2, [3], True)]
    calls = {s: [c for c in seen["calls"] if c["step"] == s] for s in range(3)}
    assert all(len(calls[s]) == 2 for s in range(3))  # 2 micro-batches of one prompt x G=4
    level = "sequence" if method == "gspo" else "token"
    clipped_any = False
    for first, second, third in zip(calls[0], calls[1], calls[2], strict=True):
        assert first["old_before"] is None and torch.equal(first["old"], first["logp"])  # ratio 1
        assert not first["clipped"].any()
        assert second["positions"] == first["positions"] and torch.equal(second["ids"], first["ids"])
        assert third["positions"] != first["positions"] and not third["clipped"].any()
        mask = second["mask"]
        # old = step 1's policy (brute force with step-1 weights); new = the current (step-2) weights
        torch.testing.assert_close(second["old"][mask].double(), first["brute"][mask], atol=1e-5, rtol=0)
        torch.testing.assert_close(second["logp"][mask].double(), second["brute"][mask], atol=1e-5, rtol=0)
        assert (second["brute"] - first["brute"])[mask].abs().max() > 1e-3  # the weights moved
        want = _brute_surrogate(second["brute"], first["brute"], second["adv"], mask, *eps, level)
        torch.testing.assert_close(second["loss"][mask].double(), want[mask], atol=1e-4, rtol=1e-4)
        clipped_any |= bool(second["clipped"].any())
    assert clipped_any  # the clip acts once the ratio leaves 1 (a large lr)


def test_a_resume_between_the_iterations_of_one_rollout_batch_reaches_the_same_weights(
    tiny_env, tmp_path, monkeypatch
) -> None:  # noqa: ANN001
    monkeypatch.setattr(groups, "group_rewards", _parity_rewards)
    common = ["method=grpo", "steps=3", "method.rl.group_size=4", "method.rl.num_iterations=2", "method.optim.lr=0.01"]
    straight = run(compose_train([*train_overrides(tiny_env, tmp_path / "straight"), *common]))
    cfg = compose_train([*train_overrides(tiny_env, tmp_path / "killed"), *common])
    with monkeypatch.context() as patch:
        kill_during_update(patch, at_step=1)  # state/ holds step 1: the next step reuses step 0's rollouts
        with pytest.raises(Killed):
            run(cfg)
    run_dir = next((tmp_path / "killed").glob("*/*/*/*/*"))
    assert read_meta(run_dir / "state")["step"] == 1
    generated = []
    real = groups.step_prefixes
    monkeypatch.setattr(groups, "step_prefixes", lambda *a, **k: generated.append(1) or real(*a, **k))
    resumed = run(cfg)
    assert len(generated) == 1  # step 1 reused the saved rollouts; only step 2 sampled
    assert (resumed.steps, resumed.samples_seen) == (straight.steps, straight.samples_seen) == (3, 4)
    want, got = final_weights(straight), final_weights(resumed)
    for key in want:
        torch.testing.assert_close(got[key], want[key], atol=1e-6, rtol=0, msg=key)
