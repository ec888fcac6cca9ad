"""The protocol card of a study: every setting of its jobs with its value, its source and where it differs
from the paper, shaped like LT-OPD's configuration tables (Tables 9-10).

Training settings shared by every training run are listed once; a run's own section lists only the settings
where it departs from the shared values (its method's defining choices). A setting no record entry covers is
shown as ``NO SOURCE`` (``tests/config/test_protocol_cards.py`` fails on it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparsectx.protocol.record import Protocol, Setting, implementation_reason
from sparsectx.protocol.settings import BENCH_FIELDS, Job

NO_SOURCE = "NO SOURCE"
"""The source column of a setting that no record entry covers."""

STAGE_TITLES = {
    "train": "Training",
    "evaluate": "Evaluation (greedy)",
    "passk": "Fixed-context Pass@K",
    "efficiency": "Efficiency",
}


def shown(value: Any) -> str:
    """Returns a setting's value as the card prints it (strings bare, everything else as JSON)."""
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("|", "\\|").replace("\n", " ")


@dataclass(frozen=True)
class Card:
    """A study's settings, checked against its paper's record."""

    experiment: str
    protocol: Protocol
    jobs: tuple[Job, ...]
    settings: tuple[Setting, ...]
    """One per (job, protocol key); implementation settings are not among them."""
    implementation: Mapping[str, str]
    """Implementation key -> why it does not change the numbers (the keys the jobs set)."""

    @property
    def differing(self) -> list[Setting]:
        """Returns the settings whose value differs from the value the paper states."""
        return [s for s in self.settings if s.differs]

    @property
    def unsourced(self) -> list[Setting]:
        """Returns the settings no record entry covers."""
        return [s for s in self.settings if s.statement is None]

    def counts(self) -> dict[str, int]:
        """Returns the card's distinct settings (stage, key, value and what the paper says of it): in all, as
        the paper states, differing from it, the project's choice, and with no source."""
        seen: dict[tuple[str, str, str, str, str], Setting] = {}
        for setting in self.settings:
            seen.setdefault(
                (setting.stage, setting.key, shown(setting.value), paper_column(setting), source_column(setting)),
                setting,
            )
        unique = list(seen.values())
        stated = [s for s in unique if s.statement is not None and s.statement.states]
        return {
            "settings": len(unique),
            "as_paper": sum(not s.differs for s in stated),
            "differ": sum(s.differs for s in stated),
            "ours": sum(s.statement is not None and not s.statement.states for s in unique),
            "no_source": sum(s.statement is None for s in unique),
        }


def build_card(experiment: str, protocol: Protocol, jobs: Sequence[Job]) -> Card:
    """Returns the card of ``jobs`` checked against ``protocol``; each benchmark's listed fields are settings
    ``bench.<field>`` of the evaluation stage, their run the benchmark."""
    settings, implementation = [], {}
    for job in jobs:
        for key, value in sorted(job.leaves.items()):
            reason = implementation_reason(key)
            if reason is not None:
                implementation[key] = reason
                continue
            settings.append(setting_of(protocol, job.stage, key, value, job.method, job.model, job.run))
    benches = next((j for j in jobs if j.benches), None)
    for name, fields in (benches.benches if benches else {}).items():
        for field_name, value in fields.items():
            key = f"{BENCH_PREFIX}{field_name}"
            settings.append(setting_of(protocol, "evaluate", key, value, BENCH_RUN, benches.model, name, name))  # type: ignore[union-attr]
    return Card(experiment, protocol, tuple(jobs), tuple(settings), dict(sorted(implementation.items())))


BENCH_PREFIX = "bench."
"""The key prefix of a benchmark's own settings on the card (``bench.max_new_tokens``)."""
BENCH_RUN = "benchmark"
"""The method a benchmark's own settings are read for (a case names benchmarks with ``benchmarks: [...]``)."""


def setting_of(
    protocol: Protocol, stage: str, key: str, value: Any, method: str, model: str, run: str, bench: str = ""
) -> Setting:
    """Returns one setting of a run (or of benchmark ``bench``) with what the record says about it (None when
    nothing covers it)."""
    entry = protocol.entry(stage, key)
    statement = None if entry is None else entry.statement(method, model, bench)
    return Setting(stage, key, value, statement, [run])


def paper_column(setting: Setting) -> str:
    """Returns the card's comparison column: as the paper, the paper's value when it differs, or not stated."""
    said = setting.statement
    if said is None:
        return NO_SOURCE
    if not said.states:
        return "not stated"
    return f"**differs: paper {shown(said.paper)}**" if setting.differs else "= paper"


def source_column(setting: Setting) -> str:
    """Returns the card's source column: the seed's section, or the project's reason; the authors' code."""
    said = setting.statement
    if said is None:
        return NO_SOURCE
    text = said.source + (f"; authors' code: {said.authors}" if said.authors else "")
    return text.replace("|", "\\|")


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Returns a GitHub Markdown table's lines."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(":--" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def setting_row(setting: Setting) -> list[str]:
    """Returns one setting's row: label, key, value, source, comparison."""
    label = setting.statement.label if setting.statement is not None else setting.key
    return [label, f"`{setting.key}`", shown(setting.value), source_column(setting), paper_column(setting)]


SETTING_HEADER = ("Setting", "Key", "Value", "Source", "Paper")


def stage_section(card: Card, stage: str) -> list[str]:
    """Returns the Markdown of one stage: the settings every run shares, then each run's own values."""
    jobs = [j for j in card.jobs if j.stage == stage]
    if not jobs:
        return []
    mine = [s for s in card.settings if s.stage == stage and not s.key.startswith(BENCH_PREFIX)]
    by_key: dict[str, list[Setting]] = {}
    for setting in mine:
        by_key.setdefault(setting.key, []).append(setting)
    shared, own = [], []
    for settings in by_key.values():
        values = {(shown(s.value), paper_column(s), source_column(s)) for s in settings}
        if len(values) == 1 and len(settings) == len(jobs):
            shared.append(settings[0])
        else:
            own.extend(settings)
    runs = ", ".join(j.run for j in jobs)
    lines = [f"## {STAGE_TITLES[stage]}", "", f"Runs: {runs}.", "", "### Every run", ""]
    lines += table(SETTING_HEADER, [setting_row(s) for s in shared])
    for job in jobs:
        rows = [setting_row(s) for s in own if s.runs == [job.run]]
        if rows:
            lines += ["", f"### {job.run}: where it departs from the shared values", ""]
            lines += table(SETTING_HEADER, rows)
    lines += bench_section(card) if stage == "evaluate" else []
    return [*lines, ""]


def bench_section(card: Card) -> list[str]:
    """Returns the benchmarks' table (a value that differs from the paper is marked) and each field's source."""
    settings = [s for s in card.settings if s.key.startswith(BENCH_PREFIX)]
    if not settings:
        return []
    names = list(dict.fromkeys(s.runs[0] for s in settings))
    cells = {(s.runs[0], s.key): s for s in settings}

    def cell(name: str, key: str) -> str:
        setting = cells.get((name, key))
        if setting is None:
            return ""
        return shown(setting.value) + (f" (**paper {shown(setting.statement.paper)}**)" if setting.differs else "")  # type: ignore[union-attr]

    keys = [f"{BENCH_PREFIX}{f}" for f in BENCH_FIELDS if any(k == f"{BENCH_PREFIX}{f}" for _, k in cells)]
    lines = ["", "### Benchmarks", "", "Prompts and files: docs/benchmarks.md (each layout cited there).", ""]
    lines += table(
        ("Benchmark", *(k.removeprefix(BENCH_PREFIX) for k in keys)), [[n, *(cell(n, k) for k in keys)] for n in names]
    )
    lines.append("")
    for key in keys:
        sources = sorted({source_column(s) for s in settings if s.key == key})
        lines.append(f"- `{key.removeprefix(BENCH_PREFIX)}`: {'; '.join(sources)}")
    return lines


def runs_text(card: Card, stage: str, runs: Sequence[str]) -> str:
    """Returns ``runs`` as the card names them: "every run" when they are all of the stage's jobs."""
    everyone = {j.run for j in card.jobs if j.stage == stage}
    if set(runs) == everyone and len(everyone) > 1:
        return "every run"
    return ", ".join(runs)


def render_card(card: Card, command: str) -> str:
    """Returns the card as Markdown: a summary, the differences from the paper, then every stage."""
    counts = card.counts()
    lines = [
        f"# Protocol card: {card.experiment}",
        "",
        f"{card.protocol.paper}. Generated from the composed configs of every job by `{command}` "
        f"(record: `conf/protocol/{card.protocol.path.name}`).",
        "",
        f"**{counts['settings']} settings: {counts['as_paper']} as the paper states, {counts['differ']} differ "
        f"from the paper, {counts['ours']} not stated by the paper (the project's choice, with its reason)"
        + (f", {counts['no_source']} with no source" if counts["no_source"] else "")
        + ".**",
        "",
        "## Differences from the paper",
        "",
    ]
    groups: dict[tuple[str, str, str, str], list[Setting]] = {}
    for setting in card.differing:
        said = setting.statement
        groups.setdefault((setting.stage, setting.key, shown(setting.value), shown(said.paper)), []).append(setting)  # type: ignore[union-attr]
    if groups:
        rows = []
        for (stage, key, value, paper), settings in groups.items():
            runs = runs_text(card, stage, [r for s in settings for r in s.runs])
            label = settings[0].statement.label  # type: ignore[union-attr]
            rows.append([stage, runs, label, f"`{key}`", value, paper, source_column(settings[0])])
        lines += table(("Stage", "Runs", "Setting", "Key", "Value", "Paper", "Source"), rows)
    else:
        lines.append("None: every setting the paper states is set to the paper's value.")
    lines.append("")
    for stage in STAGE_TITLES:
        lines += stage_section(card, stage)
    lines += ["## Implementation settings", "", "They change how a job computes, not what it computes.", ""]
    lines += table(
        ("Key", "Why it does not change the numbers"), [[f"`{k}`", r] for k, r in card.implementation.items()]
    )
    return "\n".join(lines) + "\n"
