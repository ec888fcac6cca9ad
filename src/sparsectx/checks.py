"""Config value checks shared by the typed config schemas, so every bad value is reported the same way."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sparsectx.registry import Registry


def check_choice(value: str, choices: Iterable[str], key: str) -> None:
    """Returns None; raises ValueError naming ``key``, the value and the allowed ones unless ``value`` is one."""
    allowed = list(choices)
    if value not in allowed:
        raise ValueError(f"{key}={value!r} is not one of {allowed}; pick one of those")


def check_params(fn: Callable[..., Any], params: Mapping[str, Any], fixed: set[str], key: str) -> None:
    """Returns None if ``params`` are exactly ``fn``'s keyword-only arguments minus ``fixed``; else raises.

    Args:
        fn: the registered component.
        params: the YAML ``params`` block.
        fixed: keyword-only names the loop passes itself.
        key: dotted config key of the ``params`` block, used in the message.
    """
    signature = inspect.signature(fn).parameters.values()
    expected = sorted(p.name for p in signature if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in fixed)
    missing = [f"{key}.{name}" for name in expected if name not in params]
    unknown = [f"{key}.{name}" for name in params if name not in expected]
    if missing or unknown:
        raise KeyError(
            f"{key}: missing {missing or 'nothing'}, unknown {unknown or 'nothing'}; this component takes "
            "exactly "
            f"{expected} (set them in the method preset)"
        )


def check_registry_key(registry: Registry[Any], name: str, key: str) -> None:
    """Returns None if ``name`` is a key of ``registry``; else raises KeyError naming ``key`` and the choices."""
    if name not in registry:
        try:
            registry.get(name)
        except KeyError as err:
            raise KeyError(f"{key}={name!r}: {err.args[0]}") from None
