"""``method.rollouts_per_prompt`` (LT-OPD's 8 trajectories per question, seed 000 App. B) and
``train_data.order`` (the balanced sampler's batches consumed in the file's order, App. A).

The loss of a step with k rollouts per prompt is checked against an independent computation: every one of the
k·B sequences rebuilt on its own (its prompt's contexts built alone, no repeated rows), its float64 JSD_0.5 from
the student's and the frozen teacher's logits, the token mean per sequence and the mean over the k·B sequences;
the step's gradients (vision tower included, whose one pass serves all k rows) against that loss's.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from sparsectx.context import build_context
from sparsectx.data import write_tsv
from sparsectx.generation import response_logits
from sparsectx.training import loop
from sparsectx.training.batches import TrainingSet
from sparsectx.training.config import load_train_config
from sparsectx.training.contexts import micro_contexts
from sparsectx.training.samples import sample_rows
from sparsectx.training.student import mode
from sparsectx.training.teachers import teacher_logits
from sparsectx.training.update import Trainer, accumulate_gradients, step_batches
from sparsectx.training.vision_training import trained_inputs

from .test_loop_support import TinyEnv, compose_train, make_trainer, shared_env, train_overrides, training_items

K = 3
ROLLOUTS = ["method=lt_opd", f"method.rollouts_per_prompt={K}", "method.effective_batch_size=2"]


@pytest.fixture(scope="module")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


def jsd_half(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Returns (T,) float64 JSD_0.5 = ½KL(q‖M) + ½KL(p‖M), M = ½(q + p), over the full vocabulary."""
    log_p, log_q = student.double().log_softmax(-1), teacher.double().log_softmax(-1)
    log_m = torch.logsumexp(torch.stack([log_p, log_q]), dim=0) - torch.log(torch.tensor(2.0, dtype=torch.float64))
    kl = lambda log_a: (log_a.exp() * (log_a - log_m)).sum(-1)  # noqa: E731
    return 0.5 * kl(log_q) + 0.5 * kl(log_p)


def independent_loss(trainer: Trainer, micro: list, budget: float) -> torch.Tensor:
    """Returns the step loss recomputed sequence by sequence: each prompt's contexts built alone (one row,
    ``VisionInputs.repeats`` 1), each of its rollouts scored on its own, mean over all sequences."""
    cfg, student = trainer.cfg, trainer.student
    losses = []
    for mb in micro:
        for row in range(0, len(mb.items), K):
            alone = micro_contexts(cfg, student, [mb.items[row]], [mb.positions[row]], budget)
            assert alone.vision.repeats == 1
            for tokens in mb.prefix.tokens[row : row + K]:
                t_logits = teacher_logits(student, "frozen", alone.teacher_encoded, [tokens], None, None, alone.vision)
                with mode(student.model, training=True), student.compute():
                    encoded, selections = trained_inputs(
                        student.adapter, cfg.pruner, alone.encoded, alone.selections, alone.vision
                    )
                    s_logits, _ = response_logits(
                        student.adapter, build_context(student.adapter, encoded, selections, [tokens])
                    )
                losses.append(jsd_half(s_logits[0], t_logits[0]).mean())
    assert len(losses) == K * cfg.method.effective_batch_size
    return torch.stack(losses).mean()


@pytest.mark.parametrize("micro_batch_size", [1, 2])
def test_k_rollouts_per_prompt_are_distinct_samples_and_each_a_sequence_of_the_loss(
    micro_batch_size: int, tiny_env, tmp_path
) -> None:  # noqa: ANN001
    trainer = make_trainer(
        tiny_env, tmp_path, *ROLLOUTS, f"micro_batch_size={micro_batch_size}", "method.divergence.top_k=null"
    )
    totals, micro, budget = accumulate_gradients(trainer)
    assert len(micro) == 2 // micro_batch_size and all(len(mb.items) == K * micro_batch_size for mb in micro)
    assert totals["sequences"] == K * 2
    prompts = []
    for mb in micro:
        for row in range(0, len(mb.items), K):
            group = range(row, row + K)
            assert len({mb.items[i].index for i in group}) == 1 and len({mb.positions[i] for i in group}) == 1
            assert all(mb.selections[i] is mb.selections[row] for i in group)  # one pruner choice per prompt
            assert len({tuple(mb.prefix.tokens[i].tolist()) for i in group}) == K  # k distinct draws
            prompts.append(mb.positions[row])
    assert prompts == [0, 1]  # the step's two prompts, each once
    step_grads = {name: p.grad.clone() for name, p in trainer.student.trainable.items()}
    trainer.optimizer.zero_grad(set_to_none=True)
    want = independent_loss(trainer, micro, budget)
    assert totals["loss"] == pytest.approx(float(want.detach()), rel=1e-4, abs=1e-7)
    want.backward()
    tower = [name for name in step_grads if ".visual." in name]
    assert tower and any(step_grads[name].abs().max() > 0 for name in tower)
    for name, param in trainer.student.trainable.items():
        torch.testing.assert_close(
            step_grads[name], param.grad.to(step_grads[name].dtype), atol=1e-6, rtol=1e-4, msg=name
        )


def test_rollout_table_shows_one_rollout_of_each_prompt(tiny_env, tmp_path) -> None:  # noqa: ANN001
    trainer = make_trainer(tiny_env, tmp_path, *ROLLOUTS, "micro_batch_size=2")
    _, micro, budget = accumulate_gradients(trainer)
    rows = sample_rows(trainer, 1, budget, micro)
    assert [row[1] for row in rows] == [micro[0].encoded[0].sample_id, micro[0].encoded[K].sample_id]
    assert [row[4] for row in rows] == [micro[0].prefix.texts[0], micro[0].prefix.texts[K]]


def load(env: TinyEnv, tmp_path: Path, *overrides: str):  # noqa: ANN201
    """Returns the checked config of ``conf/train.yaml`` shrunk for CPU, with ``overrides``."""
    return load_train_config(compose_train([*train_overrides(env, tmp_path), *overrides]))


@pytest.mark.parametrize(
    ("overrides", "pattern"),
    [
        (["method=lt_opd", "method.rollouts_per_prompt=0"], r"method\.rollouts_per_prompt=0 must be an int >= 1"),
        (
            ["method=kd_fixed_prefix", "method.rollouts_per_prompt=8"],
            r"method\.rollouts_per_prompt=8 with method\.prefix='reference'.*set method\.rollouts_per_prompt=1",
        ),
        (
            ["method=lt_opd", "method.rollouts_per_prompt=8", "method.rollout.do_sample=false"],
            r"method\.rollouts_per_prompt=8 with method\.rollout\.do_sample=false: greedy decoding gives k identical",
        ),
        (
            ["method=grpo", "method.rollouts_per_prompt=8"],
            r"method\.rollouts_per_prompt=8 with method\.objective='rl'.*method\.rl\.group_size=",
        ),
        (["train_data.order=sampler"], r"train_data\.order='sampler' is not one of \['shuffled', 'file'\]"),
    ],
    ids=["zero", "fixed_prefix", "greedy", "rl", "unknown_order"],
)
def test_config_errors_name_the_key_and_the_fix(overrides: list[str], pattern: str, tiny_env, tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match=pattern):
        load(tiny_env, tmp_path, *overrides)


def test_rollouts_per_prompt_is_run_defining(tiny_env, tmp_path) -> None:  # noqa: ANN001
    base = [*train_overrides(tiny_env, tmp_path), "method=lt_opd"]
    loop.run(compose_train([*base, "steps=1"]))
    with pytest.raises(ValueError, match=r"run-defining keys changed \(method\.rollouts_per_prompt: "):
        loop.run(compose_train([*base, "steps=2", "method.rollouts_per_prompt=2"]))


def write_rows(path: Path, batch: list[int] | None = None, bad_line: bool = False) -> Path:
    """Returns ``path`` holding 6 training rows (a sampler's ``batch`` column if given, a broken row if asked)."""
    items = training_items(6)
    if batch is not None:
        for item, b in zip(items, batch, strict=True):
            item.extra["batch"] = str(b)
    write_tsv(path, items)
    if bad_line:
        with path.open("a", encoding="utf-8") as handle:
            handle.write("99\tnot a row\n")
    return path


def test_file_order_trains_the_rows_in_the_files_order(tiny_env, tmp_path) -> None:  # noqa: ANN001
    trainer = make_trainer(tiny_env, tmp_path, "train_data.order=file", "method.effective_batch_size=2")
    steps = []
    for seen in (0, 2, 4, 6):  # the third step ends the epoch; the fourth starts the file again
        trainer.samples_seen = seen
        steps.append([item.index for items, _ in step_batches(trainer) for item in items])
    assert steps == [[0, 1], [2, 3], [4, 5], [0, 1]]
    shuffled = make_trainer(tiny_env, tmp_path / "s", "method.effective_batch_size=6", "micro_batch_size=6")
    first = [item.index for items, _ in step_batches(shuffled) for item in items]
    assert sorted(first) == list(range(6)) and first != list(range(6))  # the default keeps its permutation


def test_file_order_refuses_unusable_rows(tiny_env, tmp_path) -> None:  # noqa: ANN001
    path = write_rows(tmp_path / "broken.tsv", bad_line=True)
    args = [f"train_data.path={path}", "train_data.max_skip_fraction=0.5"]
    assert len(TrainingSet.load(load(tiny_env, tmp_path, *args).train_data, 0, 2).items) == 6  # shuffled: skipped
    cfg = load(tiny_env, tmp_path, *args, "train_data.order=file")
    with pytest.raises(ValueError, match=r"1 of 7 rows are unusable .*train_data\.order=file .*shift"):
        TrainingSet.load(cfg.train_data, 0, 2)


@pytest.mark.parametrize(
    ("order", "batch", "batch_size", "message"),
    [
        ("file", [0, 0, 1, 1, 2, 2], 2, None),
        ("file", [0, 0, 1, 1, 2, 2], 3, "row 2 (position 2) is in the sampler's batch 1 but trains in step 0"),
        ("shuffled", [0, 0, 1, 1, 2, 2], 2, "train_data.order=shuffled mixes its batches"),
        ("shuffled", None, 2, None),
    ],
    ids=["aligned", "other_batch_size", "shuffled_sampler_file", "plain_file"],
)
def test_a_sampler_written_file_is_checked_against_the_steps(
    order: str, batch: list[int] | None, batch_size: int, message: str | None, tiny_env, tmp_path, caplog
) -> None:  # noqa: ANN001
    path = write_rows(tmp_path / "rows.tsv", batch)
    cfg = load(tiny_env, tmp_path, f"train_data.path={path}", f"train_data.order={order}")
    with caplog.at_level(logging.WARNING, logger="sparsectx.training.batches"):
        data = TrainingSet.load(cfg.train_data, 0, batch_size)
    warnings = [r.getMessage() for r in caplog.records if r.name == "sparsectx.training.batches"]
    assert len(warnings) == (message is not None)
    assert message is None or message in warnings[0]
    assert data.shuffled == (order == "shuffled")
