"""``conf/export.yaml`` as a checked config (which run, which folder, where to), and the checks of where it goes,
which need no torch (``src/export.py`` runs them before it imports the rest)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import constants, get_token, is_offline_mode
from omegaconf import DictConfig

from sparsectx.config_schema import load_config

FOLDERS = ("auto", "adapter", "checkpoint")
"""What ``folder`` may name: the PEFT adapter, the merged or full model, or the adapter when the run has one."""
DESTINATIONS = ("hub", "local")
"""Where the folder goes: a Hub repository (``repo_id``) or a local folder (``local_dir``)."""
REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
"""A Hub repository id as this export accepts it: ``<user or org>/<name>`` (huggingface_hub
``utils._validators.validate_repo_id`` checks the full rules when the request is made)."""


class ExportRefusedError(ValueError):
    """An export refused before any work: the message names what is wrong and what to do (``src/export.py``
    answers it in one line, exit status 2, as a config error)."""


@dataclass(frozen=True)
class ExportConfig:
    """``conf/export.yaml`` (every default lives there, with its comment)."""

    run_dir: str
    folder: str
    to: str
    repo_id: str | None
    private: bool
    commit_message: str | None
    local_dir: str | None
    base_model: str | None
    evaluation: bool
    results_root: str

    def __post_init__(self) -> None:
        if self.folder not in FOLDERS:
            raise ExportRefusedError(f"folder={self.folder!r}: choose one of {', '.join(FOLDERS)}")
        if self.to not in DESTINATIONS:
            raise ExportRefusedError(f"to={self.to!r}: choose hub (push to repo_id) or local (copy into local_dir)")
        if self.to == "hub" and (self.repo_id is None or not REPO_ID.fullmatch(self.repo_id)):
            raise ExportRefusedError(
                f"repo_id={self.repo_id!r}: to=hub pushes to a Hub repository, set repo_id=<user or org>/<name> "
                "(or to=local local_dir=<folder> to write the folder here)"
            )
        if self.to == "local" and not self.local_dir:
            raise ExportRefusedError("to=local needs local_dir=<the folder to write> (it must not exist or be empty)")


def load_export_config(cfg: DictConfig) -> ExportConfig:
    """Returns the composed config as a checked ``ExportConfig``; unknown, missing or mistyped keys raise, all at
    once."""
    return load_config(ExportConfig, cfg, "the export config (conf/export.yaml)")


def check_destination(config: ExportConfig) -> None:
    """Returns None when the export can reach its destination; raises ``ExportRefusedError`` naming the fix when
    ``to=hub`` finds huggingface_hub offline or without a token, or ``to=local`` finds ``local_dir`` not empty."""
    if config.to == "hub":
        check_hub_access()
    else:
        check_local_dir(Path(config.local_dir))  # type: ignore[arg-type]  # __post_init__ requires it for to=local


def check_hub_access() -> None:
    """Returns None when huggingface_hub may send requests and has a token; raises ``ExportRefusedError`` naming the
    setting otherwise (huggingface_hub ``constants.is_offline_mode``, ``utils._auth.get_token``)."""
    if is_offline_mode():
        raise ExportRefusedError(
            "HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set: huggingface_hub is in offline mode and sends nothing; "
            "unset it to push, or export to=local local_dir=<folder> and upload that folder later (`hf upload`)"
        )
    if get_token() is None:
        raise ExportRefusedError(
            "no Hugging Face token: huggingface_hub finds none in HF_TOKEN nor in its token file "
            f"({constants.HF_TOKEN_PATH}); run `hf auth login` (`huggingface-cli login` before huggingface_hub 1.0) "
            "or set HF_TOKEN to a token with write access (https://huggingface.co/settings/tokens), or export "
            "to=local local_dir=<folder>"
        )


def check_local_dir(target: Path) -> None:
    """Returns None when ``target`` does not exist or is an empty folder; raises ``ExportRefusedError`` otherwise."""
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ExportRefusedError(
            f"local_dir={target} is not empty: export writes a folder of its own and overwrites nothing; choose "
            "another local_dir, or empty this one"
        )
