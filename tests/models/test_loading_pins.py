"""Hub ids are pinned: every real preset names the commit it is read at and reads only the local cache by
default; a checkpoint folder's identity (what run keys record) is its hub commit, else a content fingerprint."""

from __future__ import annotations

import dataclasses
import re

import pytest
import yaml

from sparsectx.models import ModelConfig
from sparsectx.models.loading import snapshot_identity
from sparsectx.models.published import MODEL_CONF_DIR

COMMIT = re.compile(r"[0-9a-f]{40}")
TINY = ModelConfig("tiny", "package:tiny-vlm", "float32", "cpu", "sdpa", 64, "grouped", 1, 64, "auto")


def _presets() -> dict[str, dict]:
    return {path.stem: yaml.safe_load(path.read_text()) for path in sorted(MODEL_CONF_DIR.glob("*.yaml"))}


def test_every_hub_preset_pins_a_commit_and_reads_local_files_only():
    hub = {name: preset for name, preset in _presets().items() if not preset["path"].startswith("package:")}
    assert len(hub) >= 9
    for name, preset in hub.items():
        assert COMMIT.fullmatch(str(preset["revision"])), f"conf/model/{name}.yaml: revision {preset['revision']!r}"
        assert preset["local_files_only"] is True, name


def test_shipped_presets_have_no_revision():
    assert _presets()["tiny"]["revision"] is None and _presets()["tiny"]["local_files_only"] is True


@pytest.mark.parametrize("revision", ["main", "v1.0", "CC594898137F460BFE9F0759E9844B3CE807CFB5", "cc59489"])
def test_revision_that_is_not_a_commit_is_refused_naming_the_key(revision):
    with pytest.raises(ValueError, match=rf"model.revision={revision!r}.*40 lowercase hex"):
        dataclasses.replace(TINY, revision=revision)


def test_hub_snapshot_is_identified_by_its_commit(tmp_path):
    commit = "0123456789abcdef0123456789abcdef01234567"
    folder = tmp_path / "models--Org--Name" / "snapshots" / commit
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    assert snapshot_identity(folder) == f"Org/Name@{commit}"


def test_local_folder_is_identified_by_its_content(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"a": 1}')
    (folder / "model.safetensors").write_bytes(b"x" * 100)
    first = snapshot_identity(folder)
    (folder / "model.safetensors").write_bytes(b"y" * 100)  # the same size, new content
    assert snapshot_identity(folder) != first
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in folder.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    assert snapshot_identity(copy) == snapshot_identity(folder)  # a copy elsewhere is the same checkpoint
