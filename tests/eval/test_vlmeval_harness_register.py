"""The hook that makes ``SparsectxVLM`` a model of VLMEvalKit's own ``run.py``
(``sparsectx.integrations.vlmeval_register``), checked without VLMEvalKit: a stand-in ``vlmeval`` package with
the two lookups ``run.py`` uses (``vlmeval.vlm``'s classes, ``vlmeval.config.supported_VLM``), the ``.pth``
file processed as Python's ``site`` processes it at start (``site.addsitedir``), and the models file's
mistakes named. ``tests/eval/test_vlmeval_adapter.py`` runs the real ``run.py`` in ``.vlmeval-env``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sparsectx.integrations.vlmeval_register import MODELS_VARIABLE, PTH_LINE, named_models, write_pth

FAKE_VLMEVAL = {
    "vlmeval/__init__.py": "",
    "vlmeval/vlm/__init__.py": "from .base import BaseModel\n",
    "vlmeval/vlm/base.py": "class BaseModel:\n    INTERLEAVE = False\n",
    "vlmeval/config.py": "from vlmeval.vlm import *\nsupported_VLM = {'GPT4o': dict}\n",
}
"""What of VLMEvalKit the hook touches: vlmeval/config.py imports ``vlmeval.vlm`` and defines ``supported_VLM``."""

PROBE = textwrap.dedent(
    """
    import json, site, sys
    site.addsitedir(sys.argv[1])                      # processes sparsectx_vlmeval.pth as at interpreter start
    import vlmeval.config, vlmeval.vlm
    lazy = "sparsectx.integrations.vlmeval_model" not in sys.modules
    entry = vlmeval.config.supported_VLM.get("sparsectx_tiny")
    cls = vlmeval.vlm.SparsectxVLM                    # what run.py's build_model_from_config looks up
    print(json.dumps({
        "names": sorted(vlmeval.config.supported_VLM), "keywords": entry.keywords if entry else None,
        "lazy": lazy, "class": cls.__name__, "base": cls.__mro__[1].__module__, "interleave": cls.INTERLEAVE,
    }))
    """
)


def _fake_vlmeval(root: Path) -> Path:
    for name, text in FAKE_VLMEVAL.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _probe(tmp_path: Path, models: dict | None) -> subprocess.CompletedProcess[str]:
    """Runs ``PROBE`` in a fresh python whose site dir holds the ``.pth`` file, with the stand-in vlmeval."""
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    write_pth(site_dir)
    env = {"PYTHONPATH": str(_fake_vlmeval(tmp_path / "fake")), "PATH": "/usr/bin:/bin"}
    if models is not None:
        (tmp_path / "models.json").write_text(json.dumps(models))
        env[MODELS_VARIABLE] = str(tmp_path / "models.json")
    command = [sys.executable, "-c", PROBE, str(site_dir)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_pth_file_registers_the_class_and_the_named_models(tmp_path: Path) -> None:
    models = {"sparsectx_tiny": {"class": "SparsectxVLM", "overrides": ["model=tiny"], "bench": "syn_mcq"}}
    done = _probe(tmp_path, {"model": models, "data": {}})  # a --config file's shape is accepted as is
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["names"] == ["GPT4o", "sparsectx_tiny"]
    assert found["keywords"] == {"overrides": ["model=tiny"], "bench": "syn_mcq"}
    assert found["lazy"] is True  # import vlmeval costs nothing more until a sparsectx model is asked for
    assert (found["class"], found["base"], found["interleave"]) == ("SparsectxVLM", "vlmeval.vlm.base", True)
    assert (tmp_path / "site" / "sparsectx_vlmeval.pth").read_text() == PTH_LINE


def test_a_name_of_vlmevalkit_is_refused_at_import(tmp_path: Path) -> None:
    done = _probe(tmp_path, {"GPT4o": {"overrides": []}})
    assert done.returncode != 0
    assert "['GPT4o'] are VLMEvalKit's own models; name yours otherwise" in done.stderr


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (None, r"SPARSECTX_VLMEVAL_MODELS=.*models\.json: no such file"),
        ("{not json", r"models\.json \(\$SPARSECTX_VLMEVAL_MODELS\) is not JSON"),
        ('["model"]', r"must hold"),
        (
            '{"m": {"class": "Qwen2VLChat"}}',
            r"model 'm' has class 'Qwen2VLChat'; .* SparsectxVLM models only",
        ),
        ('{"m": {"checkpoint": "runs/x"}}', r"model 'm' has arguments \['checkpoint'\] .*overrides"),
    ],
)
def test_models_file_mistakes_name_the_file_and_the_model(tmp_path: Path, text: str | None, match: str) -> None:
    path = tmp_path / "models.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises((FileNotFoundError, ValueError), match=match):
        named_models(path)
