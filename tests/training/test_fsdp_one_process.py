"""``distributed.strategy=fsdp`` started without a launcher: one process shards over a one-rank group.

The sharded code path (FSDP units, the gathered rollout phase, the clip over shards, DCP resume shards, the
gathered HF export) runs on one process, which is how its cost is measured on one GPU against the replicated
path (``scripts/bench_train_step.py --override distributed.strategy=fsdp``). Its steps must give the
replicated run's numbers: the same loss, gradient norm and exported weights (fp32 rounding), and the group it
made must be gone afterwards.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file

from sparsectx.models import resolve_model_path
from sparsectx.training import decode_copy, groups, loop

from .test_loop_support import TinyEnv, compose_train, shared_env, train_overrides

LR = 0.001
SCOPD_PLUS_LORA = [
    "method=scopd_plus",
    "method.positions.delta=0.3",
    "method.teacher.kind=frozen",
    "method.teacher.ema_decay=null",
    f"method.optim.lr={LR}",
]
LT_OPD_FULL = ["method=lt_opd", "method.rollout.do_sample=false", f"method.optim.lr={LR}"]
GRPO_LORA = ["method=grpo", "method.rl.group_size=4", "method.rl.num_iterations=2", f"method.optim.lr={LR}"]
"""Sampled rollouts from the seeded stream, step 1 reusing step 0's (``num_iterations``): the clipped
surrogate's ratio is then the sharded weights' against the ones that sampled."""


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


SHIPPED = "package:tiny-vlm"
"""The shipped tiny model: its embeddings and LM head share one weight (tied), which stays replicated."""


def trained(env: TinyEnv, runs_root: Path, model: str, overrides: list[str]) -> tuple[Path, dict[str, float]]:
    """Returns (the run directory, the last step's metrics) of the shrunk two-step run of ``model`` (a path,
    or ``""`` for the test's untied tiny model) with ``overrides``."""
    shrunk = train_overrides(env, runs_root)
    if model:
        shrunk = [f"model.path={model}" if o.startswith("model.path=") else o for o in shrunk]
    result = loop.run(compose_train([*shrunk, *overrides]))
    return result.run_dir, result.metrics


def equal_runs(env: TinyEnv, root: Path, model: str, method: list[str]) -> tuple[dict, dict, dict]:
    """Returns (start, replicated, sharded) weights after checking that the fsdp run of one process wrote DCP
    shards, removed its one-rank group, and logged the replicated run's loss and gradient norm."""
    replicated_dir, replicated = trained(env, root / "none", model, method)
    sharded_dir, sharded = trained(env, root / "fsdp", model, [*method, "distributed.strategy=fsdp"])
    assert not dist.is_initialized(), "the one-rank group outlived the run"
    meta = json.loads((sharded_dir / "state" / "meta.json").read_text())
    assert (meta["sharding"], meta["processes"]) == ("fsdp", 1)
    assert any((sharded_dir / "state" / "shards").iterdir()), "the sharded path wrote no DCP shards"
    for key in ("train/loss", "train/grad_norm"):
        assert sharded[key] == pytest.approx(replicated[key], rel=1e-5), key
    start = Path(resolve_model_path(model)) if model else env.model_dir
    base = load_file(str(start / "model.safetensors"))
    want = load_file(str(replicated_dir / "checkpoint" / "model.safetensors"))
    got = load_file(str(sharded_dir / "checkpoint" / "model.safetensors"))
    assert got.keys() == want.keys()
    assert any(not torch.equal(want[name], base[name]) for name in want), "no weight moved: nothing compared"
    return base, want, got


def parity_rewards(cfg, prefix, context) -> torch.Tensor:  # noqa: ANN001
    """A reward that varies inside a group (the parity of each rollout's token sum): the tiny test model's
    answers score 0 on the real scorers, which leaves every advantage 0 and nothing to compare."""
    return torch.tensor([float(int(t.sum()) % 2) for t in prefix.tokens], dtype=torch.float64)


TWIN = ["rollout_weights=copy"]
"""Rollouts decoded by the plain twin (merged LoRA or cast full-parameter weights), built before sharding and
refreshed from the gathered tensors; both runs use it, so their rollouts are the same text."""
EMA_TEACHER_TWIN = [
    "method=scopd_plus",
    "method.positions.delta=0.3",
    "method.teacher.ema_decay=0.5",
    f"method.optim.lr={LR}",
    *TWIN,
    "teacher_weights=copy",
]
"""The EMA teacher's forwards on the same twin, refreshed inside the EMA swap by a gathered pass of its own
(outside the rollout phase); at decay 0.5 the second step's teacher is not the student."""


@pytest.mark.parametrize(
    "method",
    [SCOPD_PLUS_LORA, LT_OPD_FULL, GRPO_LORA, [*SCOPD_PLUS_LORA, *TWIN], [*LT_OPD_FULL, *TWIN], EMA_TEACHER_TWIN],
    ids=[
        "scopd_plus_lora",
        "lt_opd_full",
        "grpo_lora",
        "scopd_plus_lora_twin",
        "lt_opd_full_twin",
        "scopd_plus_ema_teacher_twin",
    ],
)
def test_fsdp_on_one_process_trains_as_the_replicated_run(tiny_env, tmp_path, method, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(groups, "group_rewards", parity_rewards)
    built = []
    real_build = decode_copy.build_copy
    monkeypatch.setattr(decode_copy, "build_copy", lambda *a: built.append(1) or real_build(*a))
    _, want, got = equal_runs(tiny_env, tmp_path, "", method)
    assert len(built) == (2 if TWIN[0] in method else 0)  # each run decoded with its own twin, or none did
    for name, weight in want.items():
        torch.testing.assert_close(got[name], weight, atol=1e-6, rtol=1e-5, msg=name)


def test_tied_embeddings_train_replicated_under_fsdp(tiny_env, tmp_path) -> None:  # noqa: ANN001
    """The shipped model (tied embeddings; a unit of two modules would need a root unit) trains full-parameter.

    Its weights agree in aggregate to fp32 rounding, while an element here and there differs by a few 1e-6:
    the key biases' gradient is zero in exact arithmetic (softmax ignores a constant per query) and weights
    with near-zero gradients are many in a trained model, and Adam's first steps divide such a gradient by
    itself plus ε, turning summation-order noise into updates of up to ~lr (each element's step is at most
    ~lr, hence the element bound).
    """
    base, want, got = equal_runs(tiny_env, tmp_path, SHIPPED, LT_OPD_FULL)
    differ = moved = 0.0
    for name, weight in want.items():
        torch.testing.assert_close(got[name], weight, atol=2 * LR, rtol=0, msg=name)
        differ += float((got[name] - weight).abs().sum())
        moved += float((weight - base[name]).abs().sum())
    assert differ <= 1e-5 * moved
