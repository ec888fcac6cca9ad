"""A trained model's directory and the plain-data files of a run: the formats training writes and evaluation,
pretraining and export read (each imports them from here, none from the trainer).

- A model directory (a run's ``checkpoint/``, a LoRA run's ``adapter/``): the HF files plus
  ``sparsectx_training.json``, the training record with the sha256 of every other file (weights, config,
  tokenizer and processor files) as ``files_sha256``. ``save_model_dir`` writes it; ``verify_checkpoint`` checks
  every file before a rerun or an evaluation trusts it: a file missing (Snakemake deletes the train rule's
  declared ``config.json`` before a rerun), changed or added is damage, and a training rerun rewrites the whole
  directory from ``state/``.
- Plain-data files (a resume state's ``trainer.pt``, pretraining's ``state.pt``): ``torch_save`` writes one
  atomically and returns its sha256, computed from the bytes as ``torch.save`` writes them (never read back);
  ``load_plain`` reads one with ``torch.load(weights_only=True)``.

Directories are written as ``.<name>.tmp`` and swapped in with two renames; if a crash lands between them, the
previous complete directory is left as ``.<name>.old`` and ``recover_dir`` renames it back. A file that is
missing, unreadable or differs from its recorded digest raises ``DamagedFileError`` naming the file and the
fix; it is never loaded.

No code in state files: a digest catches damage, not an attacker, since whoever can write a run's folder can
write a payload and its digest both. So a payload holds plain data only (tensors, numbers, strings, None and
lists, tuples and dicts of them; numpy's RNG key as a tensor) and ``load_plain`` builds no other object and
calls no function named in the file. A file holding anything else (hostile, or written by an older version that
pickled numpy arrays) raises ``DamagedFileError`` naming the file and the fix, and nothing of it is used.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import torch

from sparsectx.hashing import tree_sha256
from sparsectx.io import Written, atomic_write_json, atomic_write_stream, naming_full_disk, read_json_object
from sparsectx.paths import CHECKPOINT_INFO

log = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")


class DamagedFileError(ValueError):
    """A resume state or checkpoint file is missing, unreadable or does not match its recorded digest."""


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
    info = read_json_object(info_path, _checkpoint_fix(checkpoint_dir), DamagedFileError)
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
    info = read_json_object(path, _checkpoint_fix(checkpoint_dir), DamagedFileError)
    return {key: info.get(key) for key in ("config_hash", "steps", "samples_seen")}
