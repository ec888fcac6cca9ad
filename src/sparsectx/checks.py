"""Config value checks shared by the typed config schemas, so every bad value is reported the same way."""

from __future__ import annotations

from collections.abc import Iterable


def check_choice(value: str, choices: Iterable[str], key: str) -> None:
    """Returns None; raises ValueError naming ``key``, the value and the allowed ones unless ``value`` is one."""
    allowed = list(choices)
    if value not in allowed:
        raise ValueError(f"{key}={value!r} is not one of {allowed}; pick one of those")
