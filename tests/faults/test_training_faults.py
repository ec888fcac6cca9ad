"""Fault injection into training (issue 13, findings 1, 4, 5 and 8): a damaged, truncated or half-missing
resume state or checkpoint is refused with an error naming the file and the fix, or rewritten from a valid
state, never silently restarted, trusted or evaluated; a refused resume leaves the run's record untouched;
an unusable ``model.device`` is a config error before the model loads."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from training.test_loop_support import TinyEnv, compose_train, shared_env, train_overrides

from sparsectx.checkpoints import verify_checkpoint
from sparsectx.eval.checkpoints import load_eval_model
from sparsectx.models import load_model
from sparsectx.training import checkpoint as ckpt
from sparsectx.training import loop
from sparsectx.training.config import load_train_config

pytestmark = pytest.mark.faults
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


class Killed(BaseException):
    """Stands in for SIGKILL: nothing after it runs."""


def killed_at(monkeypatch: pytest.MonkeyPatch, cfg, at_step: int) -> Path:  # noqa: ANN001
    """Returns the run directory of ``cfg`` after running it until it dies before optimizer step ``at_step``."""
    real = loop.apply_update

    def dying(trainer: loop.Trainer) -> float:
        if trainer.step == at_step:
            raise Killed
        return real(trainer)

    with monkeypatch.context() as patch:
        patch.setattr(loop, "apply_update", dying)
        with pytest.raises(Killed):
            loop.run(cfg)
    return next(Path(cfg.runs_root).glob("*/*/*/*/*"))


def base(env: TinyEnv, root: Path, *extra: str) -> list[str]:
    return [*train_overrides(env, root), "method=sft", "steps=2", *extra]


def test_state_payload_without_meta_is_refused_not_restarted(tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    cfg = compose_train(base(tiny_env, tmp_path))
    run_dir = killed_at(monkeypatch, cfg, at_step=1)
    state = run_dir / "state"
    (state / ckpt.META_FILE).unlink()
    payload = (state / ckpt.STATE_FILE).read_bytes()
    with pytest.raises(ValueError, match=rf"{state}.*{ckpt.META_FILE}.*delete") as err:
        loop.run(cfg)
    assert str(state / ckpt.STATE_FILE) in str(err.value)
    assert (state / ckpt.STATE_FILE).read_bytes() == payload  # never overwritten
    assert not (run_dir / "checkpoint").exists()


def test_state_payload_from_another_step_is_refused(tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    cfg = compose_train(base(tiny_env, tmp_path / "a"))
    run_dir = killed_at(monkeypatch, cfg, at_step=1)  # state/ at step 1
    done = loop.run(compose_train(base(tiny_env, tmp_path / "b")))  # state/ at step 2
    shutil.copyfile(done.run_dir / "state" / ckpt.STATE_FILE, run_dir / "state" / ckpt.STATE_FILE)
    with pytest.raises(ValueError, match=rf"{run_dir / 'state' / ckpt.STATE_FILE}.*does not match"):
        loop.run(cfg)


def test_truncated_state_payload_names_the_file(tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    cfg = compose_train(base(tiny_env, tmp_path))
    payload = killed_at(monkeypatch, cfg, at_step=1) / "state" / ckpt.STATE_FILE
    payload.write_bytes(payload.read_bytes()[: payload.stat().st_size // 2])
    with pytest.raises(ValueError, match=rf"{payload}.*delete"):
        loop.run(cfg)


def test_truncated_state_meta_names_the_file(tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    cfg = compose_train(base(tiny_env, tmp_path))
    meta = killed_at(monkeypatch, cfg, at_step=1) / "state" / ckpt.META_FILE
    meta.write_text(meta.read_text()[:40])
    with pytest.raises(ValueError, match=rf"{meta}.*not valid JSON.*delete"):
        loop.run(cfg)


@pytest.mark.parametrize("method", ["sft", "scopd_plus"])
def test_a_resumed_run_writes_the_same_state_bytes_as_an_uninterrupted_one(
    tiny_env,
    tmp_path,
    monkeypatch,
    method: str,  # noqa: ANN001
) -> None:
    def run_in(root: Path) -> list[str]:
        return [*train_overrides(tiny_env, root), f"method={method}", "steps=3", "method.optim.lr=0.01"]

    straight = loop.run(compose_train(run_in(tmp_path / "straight")))
    resumed_cfg = compose_train(run_in(tmp_path / "resumed"))
    killed_at(monkeypatch, resumed_cfg, at_step=2)  # dies after step 2's state was saved
    resumed = loop.run(resumed_cfg)
    # not only equal values: equal bytes, so a digest or a byte comparison can tell the two runs apart by nothing
    want = (straight.run_dir / "state" / ckpt.STATE_FILE).read_bytes()
    assert (resumed.run_dir / "state" / ckpt.STATE_FILE).read_bytes() == want


def damage(path: Path) -> None:
    """Flips the last bytes of ``path`` in place (same size: tensor data, not the header)."""
    data = bytearray(path.read_bytes())
    data[-16:] = bytes(255 - b for b in data[-16:])
    path.write_bytes(bytes(data))


def test_damaged_checkpoint_weights_are_rewritten_on_rerun(tiny_env, tmp_path) -> None:  # noqa: ANN001
    cfg = compose_train(base(tiny_env, tmp_path, "steps=1"))
    first = loop.run(cfg)
    weights = first.checkpoint / "model.safetensors"
    good = weights.read_bytes()
    verify_checkpoint(first.checkpoint)
    damage(weights)
    with pytest.raises(ValueError, match=rf"{weights}.*sha256"):
        verify_checkpoint(first.checkpoint)
    loop.run(cfg)
    assert weights.read_bytes() == good  # rewritten from state/
    verify_checkpoint(first.checkpoint)


def checkpoint_files(checkpoint: Path) -> dict[str, bytes]:
    """Returns {relative path: bytes} of every file of a checkpoint directory."""
    return {str(p.relative_to(checkpoint)): p.read_bytes() for p in sorted(checkpoint.rglob("*")) if p.is_file()}


def test_a_deleted_changed_or_added_checkpoint_file_is_rewritten_on_rerun(tiny_env, tmp_path) -> None:  # noqa: ANN001
    # Snakemake deletes the train rule's declared output (checkpoint/config.json) before a --forcerun or a
    # code-triggered rerun; the rerun must put back the whole checkpoint, not find the weights intact and exit
    cfg = compose_train(base(tiny_env, tmp_path, "steps=1"))
    checkpoint = loop.run(cfg).checkpoint
    good = checkpoint_files(checkpoint)
    assert "config.json" in good and "tokenizer_config.json" in good
    changes = {
        "config.json": lambda path: path.unlink(),  # what --forcerun does
        "tokenizer_config.json": lambda path: path.write_text(path.read_text().replace("}", ', "x": 1}', 1)),
        "chat_template.jinja": lambda path: path.write_text("{{ 'planted' }}"),
        "special_tokens_map.json": lambda path: path.write_text('{"eos_token": "x"}'),  # added: the tokenizer reads it
    }
    for name, change in changes.items():
        change(checkpoint / name)
        with pytest.raises(ValueError, match=rf"{checkpoint / name}.*Rerun the training command"):
            verify_checkpoint(checkpoint)
        loop.run(cfg)
        assert checkpoint_files(checkpoint) == good, name
        assert verify_checkpoint(checkpoint)


def test_damaged_checkpoint_is_refused_by_the_evaluator(tiny_env, tmp_path) -> None:  # noqa: ANN001
    cfg = compose_train(base(tiny_env, tmp_path, "steps=1"))
    first = loop.run(cfg)
    model_cfg = load_train_config(cfg).model
    load_eval_model(model_cfg, str(first.checkpoint), 0)  # intact: loads
    damage(first.checkpoint / "model.safetensors")
    with pytest.raises(ValueError, match=r"model\.safetensors.*sha256.*Rerun the training command"):
        load_eval_model(model_cfg, str(first.checkpoint), 0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_without_cuda_is_a_config_error_before_loading(tiny_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    def no_load(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded before the device was checked")

    monkeypatch.setattr("sparsectx.models.loading.AutoModelForImageTextToText.from_pretrained", no_load)
    cfg = compose_train(base(tiny_env, tmp_path, "model.device=cuda"))
    with pytest.raises(ValueError, match=r"model\.device='cuda'.*model\.device=cpu"):
        loop.run(cfg)
    with pytest.raises(ValueError, match=r"model\.device='cuda'"):
        load_model(load_train_config(cfg).model)
    assert not any(tmp_path.rglob("config.yaml"))  # refused before any record was written


def train_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Returns the finished ``python src/train.py <args>`` run (from ``cwd``)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{ROOT / 'src'}:{ROOT / 'tests'}"}
    command = [sys.executable, str(ROOT / "src" / "train.py"), *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def snapshot(run_dir: Path) -> dict[str, bytes]:
    """Returns {relative path: bytes} of every file of a run directory except logs."""
    return {
        str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.suffix != ".log"
    }


@pytest.mark.slow
def test_refused_resume_leaves_the_run_record_untouched(tiny_env, tmp_path) -> None:  # noqa: ANN001
    args = base(tiny_env, tmp_path, "steps=1", "run_tag=")  # one folder: a typed seed would name another run
    first = train_cli(args, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = next(tmp_path.glob("*/*/*/*/*"))
    before = snapshot(run_dir)
    assert "config.yaml" in before
    refused = train_cli([*args, "seed=1"], tmp_path)
    assert refused.returncode != 0 and "run-defining keys changed (seed: 0 -> 1)" in refused.stderr
    assert snapshot(run_dir) == before
