"""One place per fact on the ground floor (issue 43, item 2): each seam that existed twice is one.

Seeding (``sparsectx.seeding``), file and config hashing (``sparsectx.hashing``), the JSON-object reader
(``sparsectx.io``), the checkpoint record and plain-data files (``sparsectx.checkpoints``), ``BASE`` and the
record's file name ``CHECKPOINT_INFO`` (``sparsectx.paths``, which loads without torch) are each defined in one
module that training, evaluation, pretraining and the report import; no module keeps a copy or re-exports the
old name. The digests are pinned to the values the code gave before the move: they are recorded in result
files, checkpoints and resume checks.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import sparsectx.data
from sparsectx.checkpoints import DamagedFileError
from sparsectx.hashing import config_hash, file_sha256, files_sha256, tree_sha256
from sparsectx.io import read_json_object
from sparsectx.report.collect import read_result
from sparsectx.seeding import derive_seed
from sparsectx.workflow import Cell

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "sparsectx"
CONFIG = {
    "seed": 0,
    "method.optim.lr": 2e-4,
    "budget": 0.1,
    "bench": {"name": "syn_count", "path": Path("data/x.tsv")},
    "tags": ["a", "b"],
}
"""A config with a value JSON cannot encode (a ``Path``, written with ``str``), as run keys hold."""


@functools.cache
def module_trees() -> dict[str, ast.Module]:
    """Returns {relative path: parsed module} of every module of the package (parsed once per session)."""
    return {
        path.relative_to(PACKAGE).as_posix(): ast.parse(path.read_text(encoding="utf-8"), str(path))
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def definitions(name: str) -> list[str]:
    """Returns the package's modules (relative paths) that define ``name`` at module level: a function, a class or
    an assignment (imports are not definitions)."""
    found = []
    for relative, tree in module_trees().items():
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
                found.append(relative)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    found.append(relative)
    return found


def trainer_imports(package: str) -> list[str]:
    """Returns ``file:line`` of every import of ``sparsectx.training`` in ``package`` (inside functions too)."""
    found = []
    for relative, tree in module_trees().items():
        if not relative.startswith(f"{package}/"):
            continue
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            if any(n == "sparsectx.training" or n.startswith("sparsectx.training.") for n in names):
                found.append(f"{relative}:{node.lineno}")
    return found


@pytest.mark.parametrize(
    ("name", "home"),
    [
        ("derive_seed", "seeding.py"),
        ("config_hash", "hashing.py"),
        ("file_sha256", "hashing.py"),
        ("files_sha256", "hashing.py"),
        ("tree_sha256", "hashing.py"),
        ("read_json_object", "io.py"),
        ("DamagedFileError", "checkpoints.py"),
        ("CHECKPOINT_INFO", "paths.py"),
        ("BASE", "paths.py"),
    ],
)
def test_each_ground_floor_fact_is_defined_in_one_module(name: str, home: str) -> None:
    assert definitions(name) == [home]


@pytest.mark.parametrize("retired", ["file_digest", "read_json", "read_json_file"])
def test_the_retired_copies_are_gone(retired: str) -> None:
    assert definitions(retired) == []


def test_derive_seed_keeps_its_streams_and_the_data_package_does_not_re_export_it() -> None:
    assert derive_seed(0, "syn_count", 7) == 5425836746467722327
    assert derive_seed(3, "train", "pick", 7) == 3601276678175247383
    with pytest.raises(ValueError, match="data.seed"):
        derive_seed(None, "x")  # type: ignore[arg-type]
    assert not hasattr(sparsectx.data, "derive_seed")


def test_config_hash_keeps_every_recorded_digest() -> None:
    # training's meta.json / sparsectx_training.json, evaluation's provenance.config_hash and predictions rows,
    # the pipeline's data folder, a W&B run id: the values the code wrote before the move
    assert config_hash(CONFIG) == "9c2a805145bc7e05469498f2a8bded28fcf97a55bcb21ddcfc2f5fcf26aa1fed"
    assert config_hash(CONFIG, digits=16, compact=True) == "4e2f193d36b2e8fe"
    assert config_hash({"data": {"n": 3}, "overrides": ["a=1"]}, digits=10) == "9e722a5f21"
    from sparsectx.tracking import run_id

    cell = {"model": "tiny", "method": "scopd", "budget": 0.1, "seed": None, "bench": ["b", "a"]}
    assert run_id("tiny", "train", cell) == "trainf4129a1e43743e58f4b359f0"


def test_file_hashes_are_the_sha256_of_the_bytes(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    contents = {"a.bin": b"\x00" * 70_000, "sub/b.json": b'{"x": 1}'}
    for name, data in contents.items():
        (tmp_path / name).write_bytes(data)
    want = {name: hashlib.sha256(data).hexdigest() for name, data in contents.items()}
    assert file_sha256(tmp_path / "a.bin") == want["a.bin"]
    assert tree_sha256(tmp_path, sorted(contents)) == want
    assert files_sha256([tmp_path / "a.bin", tmp_path / "sub" / "b.json"]) == {
        "a.bin": want["a.bin"],
        "b.json": want["sub/b.json"],
    }


def test_the_json_object_reader_names_the_file_and_the_fix(tmp_path: Path) -> None:
    torn, listed = tmp_path / "torn.json", tmp_path / "listed.json"
    torn.write_text('{"a": ', encoding="utf-8")
    listed.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^{torn} is not valid JSON \(.*\); rerun it$"):
        read_json_object(torn, "rerun it")
    with pytest.raises(DamagedFileError, match=rf"^{listed} holds list, not a JSON object; restore it$"):
        read_json_object(listed, "restore it", DamagedFileError)
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"a": 1}), encoding="utf-8")
    assert read_json_object(good, "unused") == {"a": 1}


def test_a_result_file_that_is_no_object_names_the_rerun(tmp_path: Path) -> None:
    result = tmp_path / "syn_count.json"
    result.write_text("[]", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{result} holds list, not a JSON object; .*rerun its job"):
        read_result(result, Cell("tiny", "base", "random", 0.1, "syn_count"))


@pytest.mark.parametrize("package", ["eval", "pretrain", "report"])
def test_evaluation_pretraining_and_report_do_not_import_the_trainer(package: str) -> None:
    assert trainer_imports(package) == []


def test_loading_evaluation_and_pretraining_loads_no_trainer_module() -> None:
    code = (
        "import sys, sparsectx.eval.runner, sparsectx.eval.checkpoints, sparsectx.pretrain.train, "
        "sparsectx.report.study\n"
        "print(sorted(m for m in sys.modules if m.startswith('sparsectx.training')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
