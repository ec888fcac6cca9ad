"""How the SLURM profile asks a cluster for its jobs' status (``workflow/profiles/slurm/config.yaml``).

snakemake-executor-plugin-slurm polls ``sacct`` by default. A cluster without an accounting database
(``AccountingStorageType=accounting_storage/none``, common on small lab clusters) answers ``sacct`` with no
jobs, and Snakemake then waits forever for jobs that finished long ago. There the status must come from
``squeue``, which lists finished jobs for ``MinJobAge`` seconds after they end. ``status_command`` reads the
cluster's own configuration (``scontrol show config``) and picks the command that works there;
``SPARSECTX_SLURM_STATUS_COMMAND`` (``sacct`` or ``squeue``) overrides it.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Mapping

log = logging.getLogger(__name__)

STATUS_COMMANDS = ("sacct", "squeue")
OVERRIDE = "SPARSECTX_SLURM_STATUS_COMMAND"
SQUEUE_MIN_JOB_AGE_S = 600
"""Below this ``MinJobAge`` a finished job may leave ``squeue`` before Snakemake's next poll sees it."""


def cluster_config(environ: Mapping[str, str]) -> dict[str, str]:
    """Returns ``scontrol show config`` as {key: value}, or {} where ``scontrol`` cannot reach a controller."""
    try:
        done = subprocess.run(
            ["scontrol", "show", "config"], env=dict(environ), capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    pairs = (line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs} if done.returncode == 0 else {}


def min_job_age_s(value: str) -> int:
    """Returns ``MinJobAge`` in seconds from its ``scontrol`` spelling (``300 sec``, or a bare number)."""
    return int(value.split()[0]) if value and value.split()[0].isdigit() else 0


def status_command(environ: Mapping[str, str]) -> str:
    """Returns the plugin's ``status_command`` for this cluster: ``squeue`` without an accounting database,
    ``sacct`` with one (the plugin's default), or ``$SPARSECTX_SLURM_STATUS_COMMAND``.

    Raises:
        ValueError: naming the variable when it holds anything but ``sacct`` or ``squeue``.
    """
    chosen = environ.get(OVERRIDE, "").strip()
    if chosen:
        if chosen not in STATUS_COMMANDS:
            raise ValueError(f"{OVERRIDE}={chosen!r}: set it to one of {list(STATUS_COMMANDS)}, or unset it")
        return chosen
    config = cluster_config(environ)
    if config.get("AccountingStorageType", "") != "accounting_storage/none":
        return "sacct"  # an accounting database (or no controller to ask: the plugin's own default)
    age = min_job_age_s(config.get("MinJobAge", ""))
    if age < SQUEUE_MIN_JOB_AGE_S:
        log.warning(
            "this cluster has no accounting database, so job status comes from squeue, but MinJobAge=%d s may "
            "drop a finished job before Snakemake sees it; ask for MinJobAge >= %d in slurm.conf",
            age,
            SQUEUE_MIN_JOB_AGE_S,
        )
    return "squeue"
