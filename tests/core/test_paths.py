"""Names that become output path components (experiment, model, method, pruner, benchmark) are checked where
they become one: a separator, a ``..`` or an absolute name would put results or runs outside their root."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparsectx.paths import leaf_dir, predictions_path, result_path, run_dir

HOSTILE = ["../x", "a/b", "/abs", "..", ".hidden", "", "a\\b", "x" * 129, "tab\tname", 7]
"""Values no output folder or file may be named: separators, parent or hidden names, empty, too long, not text."""
COMPONENTS = {"experiment": 1, "model.name": 2, "method.name": 3, "pruner.name": 4}
"""The config key of each name argument of ``leaf_dir`` / ``run_dir``, by its position."""


@pytest.mark.parametrize("build", [leaf_dir, run_dir])
@pytest.mark.parametrize("key", COMPONENTS)
@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_name_is_refused_naming_the_key_and_value(build, key, value, tmp_path):
    names = ["results", "dev", "tiny", "scopd", "visionzip", 0.1]
    names[COMPONENTS[key]] = value
    with pytest.raises(ValueError) as err:
        build(*names)
    message = str(err.value)
    assert f"{key}={value!r}" in message and "letters, digits" in message


@pytest.mark.parametrize("build", [result_path, predictions_path])
@pytest.mark.parametrize("value", ["../../../x", "a/b", ".."])
def test_hostile_benchmark_name_is_refused(build, value):
    with pytest.raises(ValueError, match="benchmark name"):
        build(Path("results/dev/tiny/base/visionzip/0.1"), value)


def test_plain_names_make_the_documented_layout():
    names = ("dev", "qwen2_5_vl_7b", "scopd_plus", "visionzip")
    assert leaf_dir("results", *names, 0.1) == Path("results/dev/qwen2_5_vl_7b/scopd_plus/visionzip/0.1")
    assert run_dir("runs", "LT-OPD.v2", "Qwen2.5-VL+x", "a_b", "c", 1.0) == Path("runs/LT-OPD.v2/Qwen2.5-VL+x/a_b/c/1")
    assert result_path(Path("leaf"), "mme_realworld_lite") == Path("leaf/mme_realworld_lite.json")
