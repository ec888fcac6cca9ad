"""Makes sparsectx models selectable in VLMEvalKit's own ``run.py``, the way VLMEvalKit documents custom models,
without editing the installed ``vlmeval`` package.

VLMEvalKit looks models up in two places (docs/en/Model.md "Checklist for adding a new model", step 5;
docs/en/ConfigSystem.md): a ``--config`` file's ``"class"`` must be an attribute of ``vlmeval.vlm`` (or
``vlmeval.api``; vlmeval/run.py ``build_model_from_config``), and ``--model NAME`` must be a key of
``supported_VLM`` in ``vlmeval.config`` (vlmeval/inference.py ``infer_data``: ``supported_VLM[model_name]()``).
Its instructions add both by editing ``vlmeval/vlm/__init__.py`` and ``vlmeval/config.py`` of a clone; for an
installed package this module does the same from outside: ``install()`` puts an import hook on
``sys.meta_path`` that, right after ``vlmeval.vlm`` and ``vlmeval.config`` have run, adds

* ``vlmeval.vlm.SparsectxVLM`` (``sparsectx.integrations.vlmeval_model``), imported on first use (a module
  ``__getattr__``, Python data model "Customizing module attribute access"), so ``import vlmeval`` costs nothing
  more until a sparsectx model is asked for;
* to ``supported_VLM``, every model of the JSON file ``$SPARSECTX_VLMEVAL_MODELS`` names, in the shape of a
  ``--config`` file's ``"model"`` block (``{"<name>": {"class": "SparsectxVLM", "overrides": [...], ...}}``; a
  ``--config`` file itself may be given), each as ``functools.partial`` of its keyword arguments, as
  vlmeval/config.py writes its own entries.

``python -m sparsectx.integrations.vlmeval_register`` (run by ``make vlmeval-env``) writes
``sparsectx_vlmeval.pth`` into the running environment's site-packages: Python's ``site`` module executes a
``.pth`` line that starts with ``import`` at every interpreter start (Lib/site.py ``addpackage``), which
calls ``install()``. Only the standard library is imported at that point; a python without VLMEvalKit never
notices the hook.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import sysconfig
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

PTH_NAME = "sparsectx_vlmeval.pth"
PTH_LINE = "import sparsectx.integrations.vlmeval_register as _sparsectx_vlmeval; _sparsectx_vlmeval.install()\n"
MODELS_VARIABLE = "SPARSECTX_VLMEVAL_MODELS"
CLASS_NAME = "SparsectxVLM"
MODEL_ARGUMENTS = ("overrides", "bench", "max_new_tokens", "return_output")
"""``SparsectxVLM.__init__``'s keyword arguments (``sparsectx.integrations.vlmeval_model``)."""


def _sparsectx_vlm() -> type:
    """Returns ``SparsectxVLM`` (imported here: it imports ``vlmeval.vlm.base`` and the project's model code)."""
    from sparsectx.integrations.vlmeval_model import SparsectxVLM

    return SparsectxVLM


def build_model(**arguments: Any) -> Any:
    """Returns ``SparsectxVLM(**arguments)``: the callable behind each ``supported_VLM`` entry (VLMEvalKit calls it
    with no arguments, vlmeval/inference.py ``infer_data``)."""
    return _sparsectx_vlm()(**arguments)


def named_models(path: str | Path) -> dict[str, partial[Any]]:
    """Returns name -> ``functools.partial(build_model, **arguments)`` for each model of the JSON file ``path``.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: not JSON, not an object of models, a model whose ``class`` is not ``SparsectxVLM``, or an
            argument ``SparsectxVLM`` does not take; each names the file, the model and what to change.
    """
    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(
            f"${MODELS_VARIABLE}={path}: no such file; point it at a JSON file of sparsectx models "
            "(docs/harnesses.md) or unset it"
        )
    try:
        payload = json.loads(source.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{source} (${MODELS_VARIABLE}) is not JSON: {err}") from err
    models = payload.get("model", payload) if isinstance(payload, dict) else None
    if not isinstance(models, dict):
        raise ValueError(f'{source} (${MODELS_VARIABLE}) must hold {{"<name>": {{"overrides": [...]}}, ...}}')
    out = {}
    for name, entry in models.items():
        if not isinstance(entry, dict):
            raise ValueError(f"{source}: model {name!r} must be an object of SparsectxVLM's arguments")
        arguments = {key: value for key, value in entry.items() if key != "class"}
        if entry.get("class", CLASS_NAME) != CLASS_NAME:
            raise ValueError(
                f"{source}: model {name!r} has class {entry['class']!r}; ${MODELS_VARIABLE} registers "
                f"{CLASS_NAME} models only (VLMEvalKit's own models are in its supported_VLM already)"
            )
        unknown = sorted(set(arguments) - set(MODEL_ARGUMENTS))
        if unknown:
            raise ValueError(
                f"{source}: model {name!r} has arguments {unknown} that {CLASS_NAME} does not take; its arguments "
                f"are {list(MODEL_ARGUMENTS)} (evaluate.py's overrides go in 'overrides')"
            )
        out[str(name)] = partial(build_model, **arguments)
    return out


def _add_class(module: ModuleType) -> None:
    """Returns None after giving ``vlmeval.vlm`` a lazy ``SparsectxVLM`` attribute (chaining any ``__getattr__``
    the module has)."""
    previous: Callable[[str], Any] | None = module.__dict__.get("__getattr__")

    def lazy(name: str) -> Any:
        if name == CLASS_NAME:
            return _sparsectx_vlm()
        if previous is not None:
            return previous(name)
        raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

    module.__getattr__ = lazy  # type: ignore[method-assign]


def _add_names(module: ModuleType) -> None:
    """Returns None after adding ``$SPARSECTX_VLMEVAL_MODELS``' models to ``vlmeval.config.supported_VLM``.

    Raises:
        ValueError: a name that is already one of VLMEvalKit's models (it would replace it silently).
    """
    path = os.environ.get(MODELS_VARIABLE)
    if not path:
        return
    models = named_models(path)
    taken = sorted(set(models) & set(module.supported_VLM))
    if taken:
        raise ValueError(f"{path} (${MODELS_VARIABLE}): {taken} are VLMEvalKit's own models; name yours otherwise")
    module.supported_VLM.update(models)


AFTER_IMPORT: dict[str, Callable[[ModuleType], None]] = {"vlmeval.vlm": _add_class, "vlmeval.config": _add_names}
"""Module -> what is added to it once it has run."""


class _ThenRegister(importlib.abc.Loader):
    """The loader of a hooked module: the original loader's work, then ``AFTER_IMPORT``'s addition."""

    def __init__(self, loader: importlib.abc.Loader, name: str) -> None:
        self.loader, self.name = loader, name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        """Returns what the original loader creates (None: the default module)."""
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        """Returns None after running the module and adding sparsectx's class or names to it."""
        self.loader.exec_module(module)
        AFTER_IMPORT[self.name](module)


class RegisterHook(importlib.abc.MetaPathFinder):
    """Finds ``vlmeval.vlm`` and ``vlmeval.config`` through the other finders and wraps their loaders."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        """Returns the module's spec with its loader wrapped (``_ThenRegister``), None for any other module."""
        if fullname not in AFTER_IMPORT:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _ThenRegister(spec.loader, fullname)
                return spec
        return None


def install() -> None:
    """Returns None after putting ``RegisterHook`` first on ``sys.meta_path`` (once per process)."""
    if not any(isinstance(finder, RegisterHook) for finder in sys.meta_path):
        sys.meta_path.insert(0, RegisterHook())


def write_pth(site_packages: Path) -> Path:
    """Returns the ``.pth`` file written into ``site_packages`` that installs the hook at interpreter start."""
    pth = site_packages / PTH_NAME
    pth.write_text(PTH_LINE, encoding="utf-8")
    return pth


def main() -> None:
    """Writes the ``.pth`` file into this interpreter's site-packages (``sysconfig``'s ``purelib``)."""
    print(f"wrote {write_pth(Path(sysconfig.get_paths()['purelib']))}")


if __name__ == "__main__":
    main()
