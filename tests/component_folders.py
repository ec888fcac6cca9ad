"""A folder of a newcomer's component modules searched as part of a shipped component package (``sparsectx.pruning``,
``sparsectx.eval.scorers``), for the extension recipes' tests: a module written there is found by the package's
``register_*()`` as if it were put beside the shipped ones."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from sparsectx.registry import Registry


def component_folder(
    folder: Path, monkeypatch: pytest.MonkeyPatch, package: ModuleType, registry: Registry
) -> Iterator[Callable[[str, str], Path]]:
    """Yields ``write(module, source)``, which writes ``<module>.py`` into ``folder``, searched after ``package``'s
    own folders (``__path__``); the registry, ``sys.modules`` and the package are restored after (use with
    ``yield from`` in a fixture)."""
    folder.mkdir()
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
    monkeypatch.setattr(registry, "_entries", dict(registry._entries))
    written: list[str] = []

    def write(module: str, source: str) -> Path:
        path = folder / f"{module}.py"
        path.write_text(textwrap.dedent(source))
        written.append(module)
        importlib.invalidate_caches()  # the import system caches folder listings (importlib docs)
        return path

    yield write
    for module in written:
        sys.modules.pop(f"{package.__name__}.{module}", None)
        if hasattr(package, module):
            delattr(package, module)


def appended_to_module(
    module: ModuleType, source: str, monkeypatch: pytest.MonkeyPatch, registry: Registry
) -> dict[str, object]:
    """Returns the namespace after running ``source`` as if it were appended to ``module``'s file: with the module's
    own globals (its registry, its helpers), so a ``@registry.register(...)`` in it files the entry as a function
    added to that file would. The module itself is left unchanged and the registry is restored after the test."""
    monkeypatch.setattr(registry, "_entries", dict(registry._entries))
    namespace = dict(vars(module))
    exec(compile(textwrap.dedent(source), f"<appended to {module.__file__}>", "exec"), namespace)  # noqa: S102
    return namespace
