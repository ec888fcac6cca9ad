"""The run directory's two outputs, both written atomically (a directory exists only when it is complete).

- ``state/``: everything a resume needs (style convention 18): trainable weights, optimizer, LR scheduler,
  EMA, every RNG state (python, numpy, torch, cuda; one set per process), optimizer steps done, samples
  consumed, the W&B run id and the hash of the run-defining config; ``meta.json`` beside it is readable
  before the model loads, so a mismatched resume fails first. Under ``distributed.strategy=fsdp`` the
  weights, optimizer and EMA tensors are shards in ``state/shards/`` instead (``training.sharded_state``).
- ``checkpoint/``: the final model as a HF directory plus processor files and a model card, loadable with
  ``model.path=<dir>`` (LoRA merged into the base weights, or the full weights). A LoRA run's adapter, in PEFT's
  layout, is the same kind of directory (``training.lora_export``).

Directories are written as ``.<name>.tmp`` and swapped in with two renames; if a crash lands between them, the
previous complete directory is left as ``.<name>.old`` and ``recover_dir`` renames it back.

Each directory is valid only as a whole: ``meta.json`` records the sha256 and size of ``trainer.pt`` and
``sparsectx_training.json`` the sha256 of every other file of the checkpoint (weights, config, tokenizer and
processor files), checked before either is trusted. A state with
a payload but no readable metadata, or one whose parts disagree, raises ``DamagedFileError`` naming the file
and the fix; it is never restarted over or loaded.

No code in state files: a digest catches damage, not an attacker, since whoever can write ``state/`` can write
``trainer.pt`` and its digest both. So ``trainer.pt`` holds plain data only (tensors, numbers, strings, None and
lists, tuples and dicts of them; numpy's RNG key as a tensor) and ``load_plain`` reads it with
``torch.load(weights_only=True)``, which builds no other object and calls no function named in the file. A
state holding anything else (hostile, or written by an older version that pickled numpy arrays) raises
``DamagedFileError`` naming the file and the fix, and nothing of it is used. ``state/shards/`` is read as plain
data too (``training.sharded_state.read_shards``), as is pretraining's ``state.pt``.

What is verified when (no file is hashed twice for one use):
- save: ``trainer.pt``'s sha256 is computed from its bytes as ``torch.save`` writes them (never read back);
  a checkpoint's files are hashed once after ``save_pretrained`` wrote them, in parallel.
- resume, before the model loads (``read_meta``): ``meta.json`` readable, ``trainer.pt`` present, its size
  the recorded one (a truncated or foreign payload fails here, in milliseconds).
- resume, loading (``load_state``): ``trainer.pt``'s full sha256, hashed on a thread while ``load_plain``
  reads the file; a mismatch raises before the payload is returned, so nothing of it is used.
- rerun and evaluation (``verify_checkpoint``): every checkpoint file's full sha256, in parallel; a file
  missing (Snakemake deletes the train rule's declared ``config.json`` before a rerun), changed or added is
  damage, and a training rerun rewrites the whole directory from ``state/``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import random
import shutil
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from torch import nn

from sparsectx.dotted import flatten
from sparsectx.io import Written, atomic_write_json, atomic_write_stream, naming_full_disk
from sparsectx.models.processor import ImageTextProcessor

log = logging.getLogger(__name__)

STATE_FILE = "trainer.pt"
META_FILE = "meta.json"
CHECKPOINT_INFO = "sparsectx_training.json"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")


class DamagedFileError(ValueError):
    """A resume state or checkpoint file is missing, unreadable or does not match its recorded digest."""


def file_sha256(path: Path) -> str:
    """Returns the hex sha256 of a file's bytes (read in 16 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 24):
            digest.update(block)
    return digest.hexdigest()


def files_sha256(paths: list[Path]) -> dict[str, str]:
    """Returns {file name: hex sha256} of ``paths``, hashed on parallel threads (hashlib releases the GIL)."""
    if not paths:
        return {}
    with ThreadPoolExecutor(min(len(paths), os.cpu_count() or 1)) as pool:
        return dict(zip((p.name for p in paths), pool.map(file_sha256, paths), strict=True))


def tensor_bytes(obj: Any) -> int:
    """Returns the bytes of the distinct tensor storages in a nested dict/list/tuple (a save's size, roughly).

    A wrapper tensor subclass (torchao's 8-bit optimizer states) has no storage of its own: its inner
    tensors (``__tensor_flatten__``) are counted instead.
    """
    seen: dict[int, int] = {}
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor) and hasattr(item, "__tensor_flatten__"):
            names, _ = item.__tensor_flatten__()
            stack.extend(getattr(item, name) for name in names)
        elif isinstance(item, torch.Tensor):
            storage = item.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return sum(seen.values())


def torch_save(path: Path, obj: Any, undone: str) -> Written:
    """Returns the sha256 and size of ``path`` after ``torch.save(obj)`` wrote it atomically, hashed as written.

    A full disk raises ``OSError`` (errno ENOSPC) naming ``path``, ``undone``, the space the payload needs
    and the fix; ``path`` keeps its previous content.
    """
    return atomic_write_stream(path, lambda stream: torch.save(obj, stream), undone, tensor_bytes(obj))


def _allowed_classes() -> list[type]:
    """Returns the classes beyond plain data that a resume state may hold: torchao's 8-bit AdamW moments
    (``memory.optimizer_states=int8``, a run-defining key), once torchao's 8-bit optimizer is imported, as
    building that run's optimizer does before its state loads (importing torchao only to read is slow)."""
    eight_bit = sys.modules.get("torchao.optim.subclass_8bit")
    return [] if eight_bit is None else [eight_bit.OptimState8bit]


def load_plain(path: Path, location: torch.device | str, fix: str) -> Any:
    """Returns what ``torch.save`` wrote to ``path``, tensors on ``location``, read as plain data only.

    ``torch.load(weights_only=True)``: tensors, numbers, strings, None, lists, tuples and dicts (and
    ``_allowed_classes``). A file naming any other function or class is refused before anything in it runs, so a
    file written by someone else runs no code as whoever reads it.

    Raises:
        DamagedFileError: naming ``path``, what it holds besides plain data (it may be hostile, or written by an
            older version) and ``fix``; or that it cannot be read.
    """
    try:
        with torch.serialization.safe_globals(_allowed_classes()):
            return torch.load(path, map_location=location, weights_only=True)
    except pickle.UnpicklingError as err:
        # from None: torch's own message advises the unrestricted load, the very one refused here
        raise DamagedFileError(
            f"{path} is not plain data ({not_plain(path, err)}): it may be hostile (anyone who can write "
            f"{path.parent} can write it) or written by an older version of sparsectx. Nothing in it was run; {fix}"
        ) from None
    except (OSError, RuntimeError, EOFError) as err:
        raise DamagedFileError(f"{path} cannot be read ({err}); {fix}") from err


def not_plain(source: Path | IO[bytes], err: pickle.UnpicklingError) -> str:
    """Returns what a file ``torch.load(weights_only=True)`` refused holds besides plain data: the functions and
    classes it names (read without running them), else the first sentence of torch's reason."""
    if not isinstance(source, Path):
        source.seek(0)  # the refused load left it anywhere
    try:
        found = torch.serialization.get_unsafe_globals_in_checkpoint(source)
    except (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError):
        found = []
    if found:
        return f"it names {', '.join(sorted(found))}"
    return str(err).rpartition("WeightsUnpickler error: ")[2].split(". ")[0].splitlines()[0]


def read_json_file(path: Path, fix: str) -> dict[str, Any]:
    """Returns the JSON object in ``path``; raises ``DamagedFileError`` naming it and ``fix`` if unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DamagedFileError(f"{path} is not valid JSON ({err}); {fix}") from err
    if not isinstance(data, dict):
        raise DamagedFileError(f"{path} holds {type(data).__name__}, not a JSON object; {fix}")
    return data


def config_hash(defining: dict[str, Any]) -> str:
    """Returns the sha256 of the run-defining keys (sorted JSON)."""
    return hashlib.sha256(json.dumps(defining, sort_keys=True, default=str).encode()).hexdigest()


def _sibling(final: Path, suffix: str) -> Path:
    return final.with_name(f".{final.name}.{suffix}")


def tmp_dir(final: Path) -> Path:
    """Returns the temporary directory ``final`` is written as before the swap (``fresh_tmp`` creates it)."""
    return _sibling(final, "tmp")


def recover_dir(final: Path) -> None:
    """Returns None; if a swap was interrupted after moving ``final`` aside, moves the old copy back."""
    old = _sibling(final, "old")
    if not final.exists() and old.exists():
        os.replace(old, final)
        log.warning("recovered %s from an interrupted write", final)


def fresh_tmp(final: Path) -> Path:
    """Returns an empty temporary directory beside ``final`` (any leftover from a crash is removed)."""
    tmp = _sibling(final, "tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


@contextmanager
def discarded_on_error(tmp: Path) -> Iterator[None]:
    """Removes the half-written directory ``tmp`` if the block raises (a full disk gets its space back)."""
    try:
        yield
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def replace_dir(tmp: Path, final: Path) -> None:
    """Returns None after atomically putting the complete directory ``tmp`` at ``final``."""
    old = _sibling(final, "old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def rng_state() -> dict[str, Any]:
    """Returns this process's python, numpy, torch and (when present) CUDA RNG states as plain data (tuples of
    ints, tensors, numbers), which ``load_plain`` reads back: numpy's Mersenne Twister key is a tensor."""
    numpy = np.random.get_state(legacy=False)
    return {
        "python": random.getstate(),
        "numpy": {
            "key": torch.from_numpy(numpy["state"]["key"].astype(np.int64)),
            "pos": int(numpy["state"]["pos"]),
            "has_gauss": int(numpy["has_gauss"]),
            "gauss": float(numpy["gauss"]),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Returns None after restoring an ``rng_state`` dict."""
    random.setstate(state["python"])
    saved = state["numpy"]
    mt19937 = {"key": saved["key"].cpu().numpy().astype(np.uint32), "pos": saved["pos"]}
    np.random.set_state(
        {"bit_generator": "MT19937", "state": mt19937, "has_gauss": saved["has_gauss"], "gauss": saved["gauss"]}
    )
    torch.set_rng_state(state["torch"].cpu())
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])  # load_state mapped them to the device


def canonical(obj: Any) -> Any:
    """Returns ``obj`` with its dicts, lists and tuples rebuilt and every string interned (tensors, arrays and
    other objects are kept as they are), so that ``torch.save`` writes the same bytes for equal payloads.

    Pickle memoizes by object identity: a resumed run's optimizer keys are strings loaded from ``trainer.pt``,
    an uninterrupted run's are the code's interned literals, and a key shared with the payload's own
    ``"step"`` was written once as a back-reference in one run and twice in the other. The values were equal;
    only the bytes (and torch's content-derived serialization id) differed.
    """
    if type(obj) is str:
        return sys.intern(obj)
    if type(obj) in (dict, OrderedDict):
        return type(obj)((canonical(key), canonical(value)) for key, value in obj.items())
    if type(obj) in (list, tuple):
        return type(obj)(canonical(item) for item in obj)
    return obj


def save_state(state_dir: Path, payload: dict[str, Any], meta: dict[str, Any], tmp: Path | None = None) -> None:
    """Returns None after atomically writing ``state/`` (``trainer.pt`` + ``meta.json`` with its sha256, size).

    Args:
        state_dir: ``<run_dir>/state``.
        payload: tensors and objects for ``torch.save`` (weights, optimizer, scheduler, EMA, RNG, counters).
        meta: JSON-able summary: step, samples_seen, config_hash, defining keys, resolved config, W&B id.
        tmp: the temporary directory (``tmp_dir``) already holding the sharded run's shards, or None for a
            fresh one.
    """
    tmp = fresh_tmp(state_dir) if tmp is None else tmp
    with discarded_on_error(tmp):
        written = torch_save(tmp / STATE_FILE, canonical(payload), f"{state_dir} keeps the last state")
        atomic_write_json(tmp / META_FILE, {**meta, "payload_sha256": written.sha256, "payload_bytes": written.size})
    replace_dir(tmp, state_dir)


def _restart_fix(state_dir: Path) -> str:
    return (
        f"the resume state is damaged and is not used. Restore {state_dir} from a backup, or delete it "
        "(`rm -r` it) to start this run over from step 0"
    )


def read_meta(state_dir: Path) -> dict[str, Any] | None:
    """Returns the ``meta.json`` of a resume state, or None without a state (call ``recover_dir`` first).

    Raises ``DamagedFileError`` naming the file and the fix when ``state/`` exists but its ``meta.json`` is
    missing or unreadable, its ``trainer.pt`` is missing, or the payload's size differs from the recorded one.
    The payload's sha256 is checked by ``load_state``, which reads the file anyway.
    """
    if not state_dir.exists():
        return None
    meta_path, payload = state_dir / META_FILE, state_dir / STATE_FILE
    if not meta_path.is_file():
        found = f"{payload} exists but" if payload.is_file() else "it exists but"
        raise DamagedFileError(f"{state_dir}: {found} {meta_path} is missing; {_restart_fix(state_dir)}")
    meta = read_json_file(meta_path, _restart_fix(state_dir))
    if not payload.is_file():
        raise DamagedFileError(f"{payload} is missing beside {meta_path}; {_restart_fix(state_dir)}")
    want = meta.get("payload_bytes")
    if want is not None and (got := payload.stat().st_size) != want:
        raise DamagedFileError(
            f"{payload} does not match {meta_path} ({got} bytes, recorded {want}: truncated, damaged or from "
            f"another save); {_restart_fix(state_dir)}"
        )
    return meta


def _check_payload_digest(path: Path, meta: dict[str, Any], digest: str) -> None:
    """Raises ``DamagedFileError`` when ``digest`` (the payload's sha256) is not the one ``meta`` records."""
    want = meta.get("payload_sha256")
    if want is None:
        log.warning("%s records no payload sha256 (written before digests); %s is not verified", META_FILE, path)
    elif digest != want:
        raise DamagedFileError(
            f"{path} does not match {path.parent / META_FILE} (sha256 {digest[:12]}... recorded {want[:12]}...: "
            f"truncated, damaged or from another save); {_restart_fix(path.parent)}"
        )


def load_state(state_dir: Path, device: torch.device, meta: dict[str, Any]) -> dict[str, Any]:
    """Returns the ``trainer.pt`` payload with tensors on ``device``, read as plain data (``load_plain``).

    The file's sha256 is computed on a thread while ``load_plain`` reads it. Raises ``DamagedFileError``
    naming the file before returning anything when the digest, or the payload's step and samples seen,
    differ from ``meta`` (the ``read_meta`` result), or the file cannot be read or holds more than plain data.
    """
    path = state_dir / STATE_FILE
    # "cpu:0" (a multi-process CPU run's device) is no location torch.load can restore to; "cpu" is
    location = torch.device("cpu") if device.type == "cpu" else device
    with ThreadPoolExecutor(1, thread_name_prefix="sha256") as pool:
        digest = pool.submit(file_sha256, path)
        try:
            payload = load_plain(path, location, _restart_fix(state_dir))
        except DamagedFileError:
            _check_payload_digest(path, meta, digest.result())  # a damaged file is named as damaged
            raise
        _check_payload_digest(path, meta, digest.result())
    if not isinstance(payload, dict):
        raise DamagedFileError(f"{path} holds {type(payload).__name__}, not a dict; {_restart_fix(state_dir)}")
    for key in ("step", "samples_seen"):
        if payload.get(key) != meta.get(key):
            raise DamagedFileError(
                f"{path} does not match {state_dir / META_FILE}: {key} {payload.get(key)!r} vs "
                f"{meta.get(key)!r}; {_restart_fix(state_dir)}"
            )
    return payload


def check_resume(meta: dict[str, Any], defining: dict[str, Any], resolved: dict[str, Any], where: Path) -> list[str]:
    """Returns warnings for changed bookkeeping keys; raises ValueError naming every changed run-defining key.

    Args:
        meta: the stored ``meta.json``.
        defining: the current run-defining keys (flattened).
        resolved: the current resolved config.
        where: the run directory (for the message).
    """
    old = meta["defining"]
    changed = sorted(k for k in set(old) | set(defining) if old.get(k, "<absent>") != defining.get(k, "<absent>"))
    if changed:
        lines = "; ".join(f"{k}: {old.get(k, '<absent>')!r} -> {defining.get(k, '<absent>')!r}" for k in changed)
        raise ValueError(
            f"cannot resume {where}: run-defining keys changed ({lines}). Resume with the original values, "
            "or "
            f"start a separate run (runs_root=<new dir>) or delete {where / 'state'} to start over."
        )
    before, now = flatten(meta["resolved"]), flatten(resolved)
    return [
        f"{k} changed since the state was written: {before.get(k)!r} -> {now.get(k)!r} (bookkeeping only, resuming)"
        for k in sorted(set(before) | set(now))
        if k not in defining and before.get(k) != now.get(k)
    ]


def weight_files(checkpoint_dir: Path) -> list[Path]:
    """Returns the weight files of a model directory (safetensors, bin or pt, sharded or not), sorted."""
    return sorted(p for p in checkpoint_dir.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES)


def checkpoint_files(checkpoint_dir: Path) -> list[str]:
    """Returns the relative paths of every file of a model directory except ``sparsectx_training.json``, sorted.

    Every one of them can change what loads (a tokenizer or chat-template file as much as the weights), so
    each one's digest is recorded and checked.
    """
    return sorted(
        p.relative_to(checkpoint_dir).as_posix()
        for p in checkpoint_dir.rglob("*")
        if p.is_file() and p.relative_to(checkpoint_dir).as_posix() != CHECKPOINT_INFO
    )


def tree_sha256(root: Path, names: list[str]) -> dict[str, str]:
    """Returns {relative path: hex sha256} of the files ``names`` under ``root``, hashed on parallel threads."""
    if not names:
        return {}
    with ThreadPoolExecutor(min(len(names), os.cpu_count() or 1)) as pool:
        return dict(zip(names, pool.map(file_sha256, [root / name for name in names]), strict=True))


def save_model_dir(final: Path, write_files: Callable[[Path], None], info: dict[str, Any]) -> None:
    """Returns None after atomically writing a model directory: ``write_files(tmp)`` fills a temporary folder,
    ``sparsectx_training.json`` records ``info`` and every file's sha256 as ``files_sha256`` ({relative path: hex
    digest}), and the folder is swapped in at ``final`` (a full disk leaves ``final`` as it was)."""
    tmp = fresh_tmp(final)
    kept = f"{final} keeps its previous content, if any"
    with discarded_on_error(tmp), naming_full_disk(tmp, kept):
        write_files(tmp)
        digests = tree_sha256(tmp, checkpoint_files(tmp))
        atomic_write_json(tmp / CHECKPOINT_INFO, {**info, "files_sha256": digests})
    replace_dir(tmp, final)


def save_checkpoint(
    checkpoint_dir: Path,
    model: nn.Module,
    processor: ImageTextProcessor,
    info: dict[str, Any],
    card: str | None = None,
) -> None:
    """Returns None after atomically writing the final HF model directory with the processor files.

    Args:
        checkpoint_dir: ``<run_dir>/checkpoint``.
        model: the model to export (LoRA already merged).
        processor: the processor whose tokenizer and image-processor files go beside the weights.
        info: provenance written as ``sparsectx_training.json`` (config hash, steps, git commit); the sha256
            of every other file of the directory is added as ``files_sha256`` ({relative path: hex digest}).
        card: the model card written as ``README.md`` (``training.model_card``); None writes none.
    """

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp)
        processor.tokenizer.save_pretrained(tmp)
        processor.image_processor.save_pretrained(tmp)
        if card is not None:
            (tmp / "README.md").write_text(card, encoding="utf-8")

    save_model_dir(checkpoint_dir, write, info)


def _checkpoint_fix(checkpoint_dir: Path) -> str:
    return (
        f"the checkpoint is damaged. Rerun the training command that wrote {checkpoint_dir} (it rewrites "
        f"the checkpoint from {checkpoint_dir.parent / 'state'}), or delete {checkpoint_dir.parent} and retrain"
    )


def verify_checkpoint(checkpoint_dir: Path) -> bool:
    """Returns True after checking every file of a trained checkpoint against its recorded sha256.

    Returns False for a model directory that is not one of our trained checkpoints (no
    ``sparsectx_training.json``: a hub or pretrained model), or one written before every file's digest was
    recorded (its weight files, if recorded, are still checked). Raises ``DamagedFileError`` naming the file
    and the fix when the info file is unreadable, or a file is missing (as after Snakemake deleted the declared
    ``config.json`` for a rerun), added or differs from its digest.
    """
    checkpoint_dir = Path(checkpoint_dir)
    info_path = checkpoint_dir / CHECKPOINT_INFO
    if not info_path.is_file():
        return False
    info = read_json_file(info_path, _checkpoint_fix(checkpoint_dir))
    digests = info.get("files_sha256")
    if digests is not None:
        _check_digests(checkpoint_dir, info_path, digests, checkpoint_files(checkpoint_dir))
        return True
    weights = info.get("weights_sha256")
    if weights is not None:  # written before every file's digest was recorded
        _check_digests(checkpoint_dir, info_path, weights, [p.name for p in weight_files(checkpoint_dir)])
    checked = "only its weight files are verified" if weights is not None else "its files are not verified"
    log.warning(
        "%s was written before every file's sha256 was recorded: %s; rerunning the training command rewrites "
        "the checkpoint with them",
        info_path,
        checked,
    )
    return False


def _check_digests(checkpoint_dir: Path, info_path: Path, digests: dict[str, str], present: list[str]) -> None:
    """Raises ``DamagedFileError`` naming the first file of ``checkpoint_dir`` that is missing, not recorded in
    ``digests`` or differs from its recorded sha256."""
    for name in sorted(set(digests) ^ set(present)):
        state = "is missing" if name not in present else f"is not listed in {info_path}"
        raise DamagedFileError(
            f"{checkpoint_dir / name} {state} (its sha256 cannot be checked); {_checkpoint_fix(checkpoint_dir)}"
        )
    for name, got in tree_sha256(checkpoint_dir, present).items():
        if got != digests[name]:
            raise DamagedFileError(
                f"{checkpoint_dir / name} does not match its sha256 in {info_path} ({got[:12]}... recorded "
                f"{digests[name][:12]}...); {_checkpoint_fix(checkpoint_dir)}"
            )


def checkpoint_info(checkpoint_dir: Path) -> dict[str, Any] | None:
    """Returns the checkpoint's config hash, steps and samples seen, or None when there is no checkpoint.

    An unreadable info file raises ``DamagedFileError`` naming it.
    """
    path = checkpoint_dir / CHECKPOINT_INFO
    if not path.is_file():
        return None
    info = read_json_file(path, _checkpoint_fix(checkpoint_dir))
    return {key: info.get(key) for key in ("config_hash", "steps", "samples_seen")}
