"""Shared set-up for the training-loop tests: a tiny model directory, a tiny TSV, a composed train config
and a fresh ``Trainer``.

The model is the real HF Qwen2.5-VL class with tiny random weights (``tests/tiny_models.py``) saved with the
character-level processor, so ``model.path=<dir>`` exercises the production loading path on CPU.
No tests here.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig
from tiny_models import char_processor, noise_image, tiny_qwen2_5_vl

from sparsectx.data import Item, write_tsv
from sparsectx.training import loop
from sparsectx.training.batches import TrainingSet
from sparsectx.training.checkpoint import read_meta
from sparsectx.training.config import load_train_config
from sparsectx.training.update import Trainer

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
METHODS = sorted(path.stem for path in (CONF_DIR / "method").glob("*.yaml"))
ANSWERS = ["red", "blue", "green", "two", "three", "yes"]


@dataclass(frozen=True)
class TinyEnv:
    """Paths of the tiny model directory and training TSV."""

    model_dir: Path
    tsv: Path


def training_items(count: int) -> list[Item]:
    """Returns ``count`` synthetic training items with 112x112 noise images and short reference traces."""
    items = []
    for index in range(count):
        buffer = io.BytesIO()
        noise_image(112, 112, seed=index).save(buffer, format="PNG")
        answer = ANSWERS[index % len(ANSWERS)]
        items.append(
            Item(
                index=index,
                image_bytes=buffer.getvalue(),
                question=f"What is shown {index}?",
                options={},
                answer=answer,
                category="",
                family="detail",
                subset="",
                trace=f"<think>look</think><answer>{answer}</answer>",
                scene=json.dumps({}),
                extra={},
            )
        )
    return items


def build_env(root: Path) -> TinyEnv:
    """Returns a ``TinyEnv`` written under ``root``: model + processor files, and a 6-row training TSV."""
    model_dir = root / "tiny-model"
    processor = char_processor(14, model_dir)
    tiny_qwen2_5_vl(processor.tokenizer, seed=0).save_pretrained(model_dir)
    tsv = root / "train.tsv"
    write_tsv(tsv, training_items(6))
    return TinyEnv(model_dir, tsv)


_SHARED: dict[str, TinyEnv] = {}


def shared_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV, built on first use.

    Each test module wraps this in its own ``tiny_env`` session fixture (fixtures cannot be shared without a
    conftest, which this helper does not own).
    """
    if "env" not in _SHARED:
        _SHARED["env"] = build_env(tmp_path_factory.mktemp("tiny-train"))
    return _SHARED["env"]


def train_overrides(env: TinyEnv, runs_root: Path) -> list[str]:
    """Returns the CLI overrides that shrink ``conf/train.yaml`` to a CPU run of 2 steps x 2 sequences."""
    return [
        f"model.path={env.model_dir}",
        "model.name=tiny",
        "model.signal_chunk=8",
        f"train_data.path={env.tsv}",
        f"runs_root={runs_root}",
        "logger=none",
        "seed=0",
        "steps=2",
        "max_new_tokens=5",
        "micro_batch_size=1",
        "method.effective_batch_size=2",
        "save_every=1",
        "log_every=1",
        "sample_table_every=1",
    ]


def compose_train(overrides: list[str]) -> DictConfig:
    """Returns ``conf/train.yaml`` composed with ``overrides`` (Hydra compose API)."""
    with initialize_config_dir(version_base=None, config_dir=str(CONF_DIR)):
        return compose("train", overrides=overrides)


# A frozen teacher keeps the divergence large once the student is perturbed (a lazily initialised EMA teacher
# would follow the student).
FROZEN = ["method.teacher.kind=frozen", "method.teacher.ema_decay=null"]


def make_trainer(env, root: Path, *overrides: str) -> Trainer:  # noqa: ANN001
    """Returns a fresh Trainer (no resume) for the shrunk config with ``overrides``, its student perturbed."""
    tc = load_train_config(compose_train([*train_overrides(env, root), *overrides]))
    accelerator = Accelerator(cpu=True)
    data = TrainingSet.load(tc.train_data, tc.seed, tc.method.effective_batch_size)
    trainer = loop.setup(tc, accelerator, tc.accumulation(1), data, root, None)
    # Move the student well away from its teacher (LoRA B = 0 would also leave A without gradient): a large
    # divergence keeps fp32 batching noise (~1e-7 of the logits) far below the tolerances.
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in trainer.student.trainable.values():
            noise = torch.randn(p.shape, generator=generator)
            p.copy_(0.3 * noise) if trainer.student.peft is not None else p.add_(0.05 * noise)
    return trainer


def final_files(root: Path) -> dict[str, object]:
    """Returns a finished run's final weights (bytes) and the resume state's counters and trained tensors."""
    run_dir = next(root.glob("*/*/*/*/*"))
    meta = read_meta(run_dir / "state")
    payload = torch.load(run_dir / "state" / "trainer.pt", weights_only=False)
    return {
        "checkpoint/model.safetensors": (run_dir / "checkpoint" / "model.safetensors").read_bytes(),
        "state counters": (meta["step"], meta["samples_seen"], payload["step"], payload["samples_seen"]),
        "state weights": {k: v.numpy().tobytes() for k, v in payload["trainable"].items()},
    }
