"""The preflight's findings: one ``Problem`` per thing that would fail or score wrong, one ``Checked`` per input,
and the printed lines, summary and JSON report made of them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Problem:
    """One thing that would make a run fail or score wrong: where it is and how to fix it."""

    file: str
    """The file (or folder) at fault."""
    what: str
    """What is wrong."""
    fix: str
    """What to do about it."""
    row: str = ""
    """The row's ``index`` as written (``line N`` when it has none); "" for a whole-file problem."""
    column: str = ""
    """The column at fault; "" when no single column is."""

    def line(self) -> str:
        """Returns the problem as one printed line: file, row, column, what, fix."""
        where = "".join([f", row {self.row}" if self.row else "", f", column {self.column!r}" if self.column else ""])
        return f"PROBLEM {self.file}{where}: {self.what} -> fix: {self.fix}"


@dataclass
class Checked:
    """One input the preflight looked at (a checkpoint, a benchmark, a training file) and what it found."""

    kind: str
    """``checkpoint``, ``benchmark`` or ``training file``."""
    name: str
    """The model preset, benchmark or training file's name."""
    file: str
    """Where it was looked for."""
    facts: list[str] = field(default_factory=list)
    """What was found (printed on the input's ``ok`` line)."""
    problems: list[Problem] = field(default_factory=list)

    def add(self, file: str, what: str, fix: str, row: str = "", column: str = "") -> None:
        """Returns None after recording a problem."""
        self.problems.append(Problem(str(file), what, fix, str(row), column))


def report_lines(checks: Iterable[Checked], max_lines: int) -> list[str]:
    """Returns the printed report: an ``ok`` line per clean input, one line per problem (at most ``max_lines``
    per input, the rest counted), and the one-line summary last."""
    checks = list(checks)
    lines = []
    for check in checks:
        if not check.problems:
            lines.append(f"ok      {check.kind} {check.name} ({check.file}): {'; '.join(check.facts)}")
            continue
        lines += [problem.line() for problem in check.problems[:max_lines]]
        if len(check.problems) > max_lines:
            lines.append(
                f"PROBLEM ... and {len(check.problems) - max_lines} more in {check.kind} {check.name} "
                f"(max_lines={max_lines})"
            )
    lines.append(summary(checks))
    return lines


def summary(checks: Sequence[Checked]) -> str:
    """Returns the one-line verdict: how many inputs of each kind, how many failed, how many problems."""
    kinds: dict[str, int] = {}
    for check in checks:
        kinds[check.kind] = kinds.get(check.kind, 0) + 1
    counted = ", ".join(f"{n} {kind}{'s' if n > 1 else ''}" for kind, n in kinds.items())
    failed = [c for c in checks if c.problems]
    if not failed:
        return f"preflight passed: {counted} checked, no problem"
    problems = sum(len(c.problems) for c in failed)
    names = ", ".join(f"{c.kind} {c.name}" for c in failed)
    return (
        f"preflight FAILED: {problems} problem(s) in {len(failed)} of {len(checks)} inputs ({names}); {counted} checked"
    )


def report_json(checks: Sequence[Checked], seconds: float) -> dict[str, Any]:
    """Returns the report as data (the DAG's stamp): passed, seconds, every input with its facts and problems."""
    return {
        "passed": not any(c.problems for c in checks),
        "seconds": round(seconds, 2),
        "inputs": [asdict(c) for c in checks],
    }
