"""A small name -> object registry, one per extension point (pruners, scorers, divergences, ...)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
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
