"""Runs a command as this process's child in the terminal's process group, as a wrapper that must act after it.

``python -m sparsectx.mps`` (the MPS daemon goes after the study) and ``python -m sparsectx.pipeline`` (its record
of the run goes after Snakemake) both wrap a Snakemake run and must not change how it stops: Ctrl-C reaches the
child directly (it shares the terminal's process group) and this process ignores it and waits, so Snakemake
finishes its own bookkeeping as it would alone; a SIGTERM or SIGHUP sent to the wrapper is passed on.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Mapping, Sequence

PASSED_ON = (signal.SIGTERM, signal.SIGHUP)
"""Signals sent to the wrapper that the child receives too (Ctrl-C's SIGINT reaches it from the terminal)."""


def run_in_foreground(command: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """Returns the exit status of ``command`` run to its end (128 + n when signal n ended it, as a shell says).

    Raises:
        OSError: the command cannot be started (not found, not executable).
    """
    child = subprocess.Popen(list(command), env=None if env is None else dict(env))
    previous = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN)}
    for signum in PASSED_ON:
        previous[signum] = signal.signal(signum, lambda received, _frame: child.send_signal(received))
    try:
        status = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 128 - status if status < 0 else status
