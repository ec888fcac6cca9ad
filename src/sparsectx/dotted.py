"""Nested configs as flat dotted keys: how a resumed run compares its settings and a protocol card lists them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Returns {dotted key: leaf value} of a plain nested mapping (a resolved config); lists are leaves."""
    if isinstance(node, Mapping):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: node}
