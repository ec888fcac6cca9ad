"""A paper's protocol as data: for each setting, the value the paper states and where, or why the project chose.

``conf/protocol/<paper>.yaml`` holds one record per paper (``experiments`` names the presets that reproduce
it); ``conf/protocol/implementation.yaml`` names the settings that change how a run computes, never what it
computes (they are listed, not compared). A record entry is keyed by a dotted config key, or by a prefix that
covers a whole subtree (``method.rl``); the longest matching key describes a setting. An entry states either
``paper`` (with ``source``: the seed's section, table or equation) or ``ours`` (the reason the project sets
it), and may add ``authors`` (the authors' released code, with its file) and ``cases``: the same fields for
some methods or models only (the first case naming the run wins).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from sparsectx.eval.config import CONF_DIR

PROTOCOL_DIR = CONF_DIR / "protocol"
"""Where the paper records live (plain YAML, not a Hydra group)."""

IMPLEMENTATION_FILE = "implementation.yaml"
"""The record of settings that change how a run computes, not what (shared by every paper)."""

STAGES = ("train", "evaluate", "passk", "efficiency")
"""The jobs a protocol card describes, in the card's order."""

FIELDS = ("label", "paper", "source", "ours", "authors", "cases")
CASE_FIELDS = ("methods", "models", "benchmarks", "paper", "source", "ours", "authors")


@dataclass(frozen=True)
class Statement:
    """What one entry (or one of its cases) says about a setting for a given run."""

    label: str
    paper: Any
    """The value the paper states; ``None`` with ``states`` false when the paper does not state it."""
    states: bool
    """True when the paper states the value (``paper`` may then be any value, null included)."""
    source: str
    """Where the paper states it, or the project's reason (``ours``) when it does not."""
    authors: str
    """The authors' released code's value and file, when it is known and worth showing."""


@dataclass(frozen=True)
class Entry:
    """One record entry: a setting (or subtree) and what the paper says about it."""

    key: str
    label: str
    fields: Mapping[str, Any]
    cases: tuple[Mapping[str, Any], ...] = ()

    def statement(self, method: str, model: str, bench: str = "") -> Statement:
        """Returns what the entry says for a run of ``method`` on ``model`` (a benchmark's own setting: of
        ``bench``): its first matching case, else the entry's own fields."""
        chosen: Mapping[str, Any] = self.fields
        for case in self.cases:
            named = (case.get("methods", [method]), case.get("models", [model]), case.get("benchmarks", [bench]))
            if method in named[0] and model in named[1] and bench in named[2]:
                chosen = {**{k: v for k, v in self.fields.items() if k not in ("paper", "ours")}, **case}
                break
        states = "paper" in chosen
        source = str(chosen.get("source", "")) if states else f"ours: {chosen.get('ours', '')}"
        return Statement(self.label, chosen.get("paper"), states, source, str(chosen.get("authors", "")))


@dataclass(frozen=True)
class Protocol:
    """A paper's record: its entries by key, and the presets reproducing it."""

    name: str
    paper: str
    experiments: tuple[str, ...]
    entries: Mapping[str, Mapping[str, Entry]]
    """Stage -> key -> entry."""
    path: Path

    def entry(self, stage: str, key: str) -> Entry | None:
        """Returns the entry describing ``key`` at ``stage``: the longest entry key equal to it or a dotted
        prefix of it (None when no entry covers it)."""
        parts = key.split(".")
        for end in range(len(parts), 0, -1):
            found = self.entries.get(stage, {}).get(".".join(parts[:end]))
            if found is not None:
                return found
        return None


def _entry(path: Path, stage: str, key: str, raw: Any) -> Entry:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{path}: {stage}.{key} must be a mapping with `paper` + `source` or `ours`")
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise ValueError(f"{path}: {stage}.{key} has unknown fields {unknown}; the fields are {list(FIELDS)}")
    cases = tuple(raw.get("cases") or ())
    for number, case in enumerate((dict(raw), *cases)):
        where = f"{path}: {stage}.{key}" + (f" case {number}" if number else "")
        extra = sorted(set(case) - set(FIELDS if number == 0 else CASE_FIELDS))
        if extra:
            raise ValueError(f"{where} has unknown fields {extra}; a case takes {list(CASE_FIELDS)}")
        if number and not ({"methods", "models", "benchmarks"} & set(case)):
            raise ValueError(f"{where} names no `methods`, `models` or `benchmarks`")
        if "paper" in case and not case.get("source") and not (number and raw.get("source")):
            raise ValueError(f"{where} states `paper` without its `source` (the seed's section or table)")
        if number == 0 and "paper" not in case and not case.get("ours"):
            raise ValueError(f"{where} has neither `paper` (with `source`) nor `ours` (the project's reason)")
    fields = {k: v for k, v in raw.items() if k != "cases"}
    return Entry(key, str(raw.get("label") or key), fields, cases)


def read_protocol(path: Path) -> Protocol:
    """Returns the checked record of one paper file.

    Raises:
        ValueError: a malformed entry, naming the file, the stage and the key.
    """
    raw = yaml.safe_load(path.read_text()) or {}
    for field_name in ("paper", "experiments"):
        if field_name not in raw:
            raise ValueError(f"{path}: no `{field_name}`")
    unknown = sorted(k for k in set(raw) - {"paper", "experiments", *STAGES} if not str(k).startswith("x-"))
    if unknown:
        raise ValueError(
            f"{path}: unknown sections {unknown}; a record has paper, experiments, {STAGES} and x-<name> anchors"
        )
    entries = {
        stage: {str(key): _entry(path, stage, str(key), value) for key, value in (raw.get(stage) or {}).items()}
        for stage in STAGES
    }
    return Protocol(path.stem, str(raw["paper"]), tuple(raw["experiments"]), entries, path)


@cache
def protocols() -> tuple[Protocol, ...]:
    """Returns every paper record of ``conf/protocol`` (the implementation record aside)."""
    files = sorted(p for p in PROTOCOL_DIR.glob("*.yaml") if p.name != IMPLEMENTATION_FILE)
    return tuple(read_protocol(p) for p in files)


def protocol_of(experiment: str) -> Protocol | None:
    """Returns the record of the paper that ``experiment`` reproduces (None for a preset of no paper)."""
    found = [p for p in protocols() if experiment in p.experiments]
    if len(found) > 1:
        raise ValueError(f"experiment {experiment!r} is claimed by {[str(p.path) for p in found]}")
    return found[0] if found else None


@cache
def implementation_keys() -> dict[str, str]:
    """Returns key prefix -> why it does not change the numbers (``conf/protocol/implementation.yaml``)."""
    raw = yaml.safe_load((PROTOCOL_DIR / IMPLEMENTATION_FILE).read_text()) or {}
    return {str(k): str(v) for k, v in raw.items()}


def implementation_reason(key: str) -> str | None:
    """Returns why ``key`` changes how a run computes but not what (None when it is a protocol setting)."""
    keys = implementation_keys()
    parts = key.split(".")
    for end in range(len(parts), 0, -1):
        reason = keys.get(".".join(parts[:end]))
        if reason is not None:
            return reason
    return None


def same_value(value: Any, paper: Any) -> bool:
    """Returns whether a configured value equals the paper's (numbers to a relative 1e-9, lists by item)."""
    if isinstance(value, bool) or isinstance(paper, bool):
        return value is paper
    if isinstance(value, int | float) and isinstance(paper, int | float):
        return math.isclose(float(value), float(paper), rel_tol=1e-9, abs_tol=0.0)
    if isinstance(value, Sequence) and isinstance(paper, Sequence) and not isinstance(value, str):
        if isinstance(paper, str) or len(value) != len(paper):
            return False
        return all(same_value(v, p) for v, p in zip(value, paper, strict=True))
    return value == paper


@dataclass
class Setting:
    """One setting of one run as the card shows it."""

    stage: str
    key: str
    value: Any
    statement: Statement | None
    runs: list[str] = field(default_factory=list)

    @property
    def differs(self) -> bool:
        """Returns whether the paper states a value and the run sets another."""
        return self.statement is not None and self.statement.states and not same_value(self.value, self.statement.paper)


def deviations(protocol: Protocol, stage: str, leaves: Mapping[str, Any], method: str, model: str) -> list[str]:
    """Returns one line per setting of a run that differs from what the paper states (for the run's log)."""
    lines = []
    for key, value in leaves.items():
        entry = protocol.entry(stage, key)
        if entry is None or implementation_reason(key) is not None:
            continue
        said = entry.statement(method, model)
        if said.states and not same_value(value, said.paper):
            lines.append(
                f"{key} = {value!r} differs from {protocol.paper}'s {said.paper!r} ({said.source}); the protocol "
                "card lists it as a difference"
            )
    return lines
