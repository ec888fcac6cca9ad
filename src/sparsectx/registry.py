"""A small name -> object registry, one per extension point (pruners, scorers, divergences, ...)."""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable, Collection, Iterable, Iterator
from types import ModuleType
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps registry keys (the YAML file stems under ``conf/<group>/``) to implementations."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Returns a decorator that files its argument under ``name``; a second use of a name is an error."""

        def add(obj: T) -> T:
            if name in self._entries:
                raise KeyError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = obj
            return obj

        return add

    def get(self, name: str) -> T:
        """Returns the entry called ``name``; an unknown name raises with close matches and every name."""
        if name not in self._entries:
            close = difflib.get_close_matches(name, self._entries, n=3)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            raise KeyError(f"unknown {self.kind} {name!r}.{hint} Available: {', '.join(sorted(self._entries))}")
        return self._entries[name]

    def names(self) -> list[str]:
        """Returns the registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


def package_modules(package: str, path: Iterable[str], skip: Collection[str]) -> Iterator[tuple[str, ModuleType]]:
    """Yields (name, module) for every module in a package's folders but ``skip``, each imported, so that a component
    package (pruners, scorers) registers whatever modules it holds without an import line per module.

    ``path`` is the package's ``__path__``; ``pkgutil.iter_modules`` yields each folder's modules in sorted order
    (CPython ``Lib/pkgutil.py``, ``_iter_file_finder_modules``), so registration order is stable.
    """
    for found in pkgutil.iter_modules(path):
        if found.name not in skip:
            yield found.name, importlib.import_module(f"{package}.{found.name}")


def module_specs(
    package: str, path: Iterable[str], skip: Collection[str], spec_type: type[T], kind: str, recipe: str, shared: str
) -> Iterator[T]:
    """Yields the ``SPEC`` of every module of a component package (``package_modules``), checked: each module
    defines a ``spec_type`` named like the module. ``kind`` names such a module in messages ("operator",
    "family"), ``recipe`` where adding one is described, ``shared`` what else carries the name.

    Raises:
        TypeError: a module defines no ``SPEC``, or one that is not a ``spec_type``.
        ValueError: a module's ``SPEC.name`` differs from the module's name.
    """
    for name, module in package_modules(package, path, skip):
        spec = getattr(module, "SPEC", None)
        if not isinstance(spec, spec_type):
            raise TypeError(
                f"{module.__file__}: a{'n' if kind[0] in 'aeiou' else ''} {kind} module of {package} defines no SPEC "
                f"(found {type(spec).__name__}); add SPEC = {spec_type.__name__}(name={name!r}, ...) at its end "
                f"({recipe}), or, if it is no {kind}, add {name!r} to its package's INFRASTRUCTURE_MODULES"
            )
        if spec.name != name:
            raise ValueError(
                f"{module.__file__}: SPEC.name={spec.name!r} differs from the module's name {name!r}; rename the "
                f"module {spec.name}.py ({shared})"
            )
        yield spec
