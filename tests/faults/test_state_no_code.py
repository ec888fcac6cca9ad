"""No code in state files (issue 39, item 1): a resume state is read as plain data, never unpickled as objects.

The digests in ``meta.json`` catch damage, not an attacker: whoever can write the run directory can write the
payload and its digest both. So each state below is hostile with matching digests (written by the project's
own save functions, or re-hashed): an object whose unpickling would create a marker file. Every resume must
refuse it with an error naming the file and the fix, and the marker must not exist: ``trainer.pt`` of a
training run, pretraining's ``state.pt``, and a sharded state's ``.metadata`` and its non-tensor values (DCP
pickles both), which must also name no file outside the verified shards. A normal state still round-trips,
its RNG states exactly."""

from __future__ import annotations

import json
import pickle
import random
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.distributed.checkpoint as dcp
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig
from training.test_loop_support import CONF_DIR, TinyEnv, compose_train, shared_env, train_overrides

from sparsectx.checkpoints import DamagedFileError
from sparsectx.pretrain import train as pretrain
from sparsectx.training import checkpoint as ckpt
from sparsectx.training import loop
from sparsectx.training.sharded_state import SHARDS, load_shards, shard_digests, shard_tensors

pytestmark = pytest.mark.faults
ASSET = Path(__file__).resolve().parents[2] / "src" / "sparsectx" / "assets" / "tiny-vlm"
ONE = SimpleNamespace(process_index=0, num_processes=1)
"""The accelerator fields the shard digests read: one process hashes every file."""


class RunsCode:
    """Unpickles by calling ``Path.touch(marker)``: any code could run in its place."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return Path.touch, (self.marker,)


NAMED = r"\(it names [^)]*pathlib\.Path[^)]*\)"
"""How a refusal names what ``RunsCode`` would have called (``pathlib.Path.touch``, or ``getattr`` and
``pathlib.Path`` as ``torch.save`` pickles it)."""


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_training_state_that_would_run_code_is_refused_on_resume(tiny_env: TinyEnv, tmp_path: Path) -> None:
    def training(steps: int) -> list[str]:
        return [*train_overrides(tiny_env, tmp_path / "runs"), "method=sft", f"steps={steps}"]

    state = loop.run(compose_train(training(1))).run_dir / "state"
    meta = json.loads((state / ckpt.META_FILE).read_text())
    marker = tmp_path / "code-ran"
    hostile = {"step": meta["step"], "samples_seen": meta["samples_seen"], "rng": [RunsCode(marker)]}
    ckpt.save_state(state, hostile, meta)  # the attacker writes meta.json too: size and sha256 match
    before = _files(state)
    with pytest.raises(
        DamagedFileError,
        match=rf"{state / ckpt.STATE_FILE} is not plain data {NAMED}: it may be hostile.*rm -r",
    ):
        loop.run(compose_train(training(2)))
    assert not marker.exists()
    assert _files(state) == before  # refused, not restarted over


def _pretrain_config(root: Path) -> DictConfig:
    """Returns ``conf/pretrain_tiny.yaml`` on CPU, writing to ``root/out`` (processor files only) and resuming
    from ``root/state``."""
    out = root / "out"
    out.mkdir(parents=True)
    for name in ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "processor_config.json"]:
        shutil.copy(ASSET / name, out / name)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("pretrain_tiny", overrides=["device=cpu", f"out_dir={out}", f"state_dir={root / 'state'}"])


def test_a_pretraining_state_that_would_run_code_is_refused_on_resume(tmp_path: Path) -> None:
    cfg = _pretrain_config(tmp_path)
    model = torch.nn.Linear(4, 4)
    marker = tmp_path / "code-ran"
    state = tmp_path / "state" / "state.pt"
    pretrain._save_state(state.parent, model, torch.optim.AdamW(model.parameters()), 1, [], 1.0, RunsCode(marker))
    before = state.read_bytes()
    with pytest.raises(
        DamagedFileError,
        match=rf"{state} is not plain data {NAMED}: it may be hostile.*delete {state}",
    ):
        pretrain.run(cfg)
    assert not marker.exists()
    assert state.read_bytes() == before


def _trained() -> tuple[SimpleNamespace, torch.optim.Optimizer]:
    """Returns a student-like (model, no EMA) after one AdamW step, and its optimizer."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(2, 8)).sum().backward()
    optimizer.step()
    return SimpleNamespace(model=model, ema=None), optimizer


def _sharded_state(root: Path, tensors: dict) -> tuple[Path, dict]:
    """Returns (``state/``, its ``meta.json`` entries) after DCP wrote ``tensors`` into ``state/shards``."""
    dcp.save(tensors, checkpoint_id=root / "state" / SHARDS, no_dist=True)
    return root / "state", {"shards_sha256": shard_digests(ONE, root / "state" / SHARDS)}


def _load_into_fresh(state: Path, meta: dict) -> tuple[SimpleNamespace, torch.optim.Optimizer]:
    student = SimpleNamespace(model=torch.nn.Linear(8, 8), ema=None)
    optimizer = torch.optim.AdamW(student.model.parameters(), lr=0.5)
    load_shards(SimpleNamespace(accelerator=ONE, student=student, optimizer=optimizer), state, meta, {})
    return student, optimizer


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_intact_shards_load_as_plain_data(tmp_path: Path) -> None:
    student, optimizer = _trained()
    state, meta = _sharded_state(tmp_path, shard_tensors(student, optimizer))
    loaded, loaded_optimizer = _load_into_fresh(state, meta)
    assert torch.equal(loaded.model.weight, student.model.weight)
    assert loaded_optimizer.param_groups[0]["lr"] == 0.1  # a non-tensor value, read from the shards
    assert torch.equal(
        loaded_optimizer.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"]
    )


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_shard_metadata_that_would_run_code_is_refused(tmp_path: Path) -> None:
    state, _ = _sharded_state(tmp_path, shard_tensors(*_trained()))
    marker = tmp_path / "code-ran"
    (state / SHARDS / ".metadata").write_bytes(pickle.dumps(RunsCode(marker)))
    meta = {"shards_sha256": shard_digests(ONE, state / SHARDS)}  # the attacker re-hashes the shards
    with pytest.raises(
        DamagedFileError,
        match=rf"{state / SHARDS / '.metadata'} is not DCP metadata {NAMED}.*hostile.*delete",
    ):
        _load_into_fresh(state, meta)
    assert not marker.exists()


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_shard_value_that_would_run_code_is_refused(tmp_path: Path) -> None:
    tensors = shard_tensors(*_trained())
    marker = tmp_path / "code-ran"
    tensors["optim"]["param_groups"][0]["lr"] = RunsCode(marker)  # DCP pickles non-tensor values
    state, meta = _sharded_state(tmp_path, tensors)
    with pytest.raises(
        DamagedFileError,
        match=rf"{state / SHARDS}.*the value of optim\.param_groups\.0\.lr is not plain data {NAMED}.*hostile",
    ):
        _load_into_fresh(state, meta)
    assert not marker.exists()


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_shard_metadata_naming_a_file_outside_the_verified_shards_is_refused(tmp_path: Path) -> None:
    state, _ = _sharded_state(tmp_path, shard_tensors(*_trained()))
    shards = state / SHARDS
    shard = next(p for p in shards.iterdir() if p.suffix == ".distcp")
    shutil.copy(shard, tmp_path / "elsewhere.distcp")  # unverified: meta.json lists only the shards' files
    metadata = dcp.FileSystemReader(shards).read_metadata()  # our own file: trusted here
    for info in metadata.storage_data.values():
        info.relative_path = "../../elsewhere.distcp"
    with open(shards / ".metadata", "wb") as handle:
        pickle.dump(metadata, handle)
    meta = {"shards_sha256": shard_digests(ONE, shards)}
    with pytest.raises(DamagedFileError, match=r"\.metadata names \.\./\.\./elsewhere\.distcp.*not one of"):
        _load_into_fresh(state, meta)


def _draws() -> tuple:
    return random.random(), random.gauss(0, 1), np.random.standard_normal(3).tolist(), torch.rand(3).tolist()


def test_a_saved_state_holds_plain_data_and_restores_every_rng_exactly(tmp_path: Path) -> None:
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    random.gauss(0, 1), np.random.standard_normal()  # both now hold a cached gaussian
    ckpt.save_state(
        tmp_path / "state", {"step": 1, "samples_seen": 2, "rng": [ckpt.rng_state()]}, {"step": 1, "samples_seen": 2}
    )
    want = _draws()
    _draws()  # moves every generator on
    assert torch.serialization.get_unsafe_globals_in_checkpoint(tmp_path / "state" / ckpt.STATE_FILE) == []
    meta = ckpt.read_meta(tmp_path / "state")
    ckpt.set_rng_state(ckpt.load_state(tmp_path / "state", torch.device("cpu"), meta)["rng"][0])
    assert _draws() == want


def test_torchaos_8bit_optimizer_states_load(tmp_path: Path) -> None:
    from torchao.optim.subclass_8bit import OptimState8bit  # memory.optimizer_states=int8

    moment = OptimState8bit.zeros((4096,), signed=True, block_size=256, device="cpu")
    payload = {"step": 1, "samples_seen": 1, "optimizer": {"state": {0: {"exp_avg": moment}}}}
    ckpt.save_state(tmp_path / "state", payload, {"step": 1, "samples_seen": 1})
    loaded = ckpt.load_state(tmp_path / "state", torch.device("cpu"), ckpt.read_meta(tmp_path / "state"))
    assert isinstance(loaded["optimizer"]["state"][0]["exp_avg"], OptimState8bit)
