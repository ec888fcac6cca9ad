"""``sparsectx.foreground``: the wrapper around a Snakemake run (``sparsectx.pipeline``, ``sparsectx.mps``) lets
the run stop as it would alone. Checked on real processes: a SIGTERM to the wrapper reaches the child, a SIGINT
sent to the wrapper alone does not stop it (Ctrl-C reaches the child from the terminal), and the exit status is
the child's, 128 + n when signal n ended it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CHILD = """
import os, signal, sys, time
out = sys.argv[1]
def stop(signum, _frame):
    open(out, "a").write(f"signal {signum}\\n")
    sys.exit(3)
signal.signal(signal.SIGTERM, stop)
open(out, "a").write(f"started {os.getpid()}\\n")
time.sleep(60)
"""

WRAPPER = "import sys; from sparsectx.foreground import run_in_foreground; sys.exit(run_in_foreground(sys.argv[1:]))"


def start(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path, int]:
    """Returns the running wrapper, the child's log and the child's pid, once the child has started."""
    log = tmp_path / "child.log"
    wrapper = subprocess.Popen([sys.executable, "-c", WRAPPER, sys.executable, "-c", CHILD, str(log)])
    deadline = time.monotonic() + 30
    while not (log.is_file() and "started" in log.read_text()):
        assert wrapper.poll() is None and time.monotonic() < deadline, "the child did not start"
        time.sleep(0.05)
    return wrapper, log, int(log.read_text().split()[1])


def test_a_sigterm_to_the_wrapper_reaches_the_child_and_its_status_comes_back(tmp_path: Path) -> None:
    wrapper, log, _ = start(tmp_path)
    wrapper.send_signal(signal.SIGTERM)
    assert wrapper.wait(timeout=30) == 3
    assert f"signal {signal.SIGTERM.value}" in log.read_text()


def test_a_sigint_to_the_wrapper_alone_leaves_the_child_running(tmp_path: Path) -> None:
    wrapper, log, child = start(tmp_path)
    wrapper.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert wrapper.poll() is None and "signal" not in log.read_text()
    os.kill(child, signal.SIGKILL)
    assert wrapper.wait(timeout=30) == 128 + signal.SIGKILL.value  # as a shell reports a killed command


def test_a_command_that_cannot_start_raises() -> None:
    from sparsectx.foreground import run_in_foreground

    with pytest.raises(OSError):
        run_in_foreground(["/nonexistent/command"])
