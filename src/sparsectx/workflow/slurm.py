"""What the SLURM profile (``workflow/profiles/slurm/config.yaml``) reads from the cluster when it is loaded.

Job status: snakemake-executor-plugin-slurm polls ``sacct`` by default. A cluster without an accounting database
(``AccountingStorageType=accounting_storage/none``, common on small lab clusters) answers ``sacct`` with no
jobs, and Snakemake then waits forever for jobs that finished long ago. There the status must come from
``squeue``, which lists finished jobs for ``MinJobAge`` seconds after they end. ``status_command`` reads the
cluster's own configuration (``scontrol show config``) and picks the command that works there;
``SPARSECTX_SLURM_STATUS_COMMAND`` (``sacct`` or ``squeue``) overrides it.

Settings checked before anything is queued (issue 40, "Bad input"): without these checks a partition that does
not exist fails every ``sbatch`` ("Invalid partition name specified") only after the local jobs ran, the plugin
checks an account only at the first submission (``accounts.py`` ``validate_account``), and a job larger than
every node of the partition is refused by ``sbatch`` ("Requested node configuration is not available") while
the study's other jobs run, or, for too many CPUs, pends forever (reason ``PartitionConfig``).
``checked_partition`` and ``checked_account`` fail when the profile is loaded, naming the environment variable;
``node_resources`` puts the partition's largest node into the profile's default-resources, against which
``check_job_shapes`` measures the grid's jobs when the Snakefile is parsed (``workflow/rules/common.smk``).
Where no SLURM command is installed (a dry run on a laptop) or the controller does not answer, nothing is
checked: there is no cluster to check against, and ``sbatch`` would fail the same way.
"""

from __future__ import annotations

import getpass
import logging
import re
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

PARTITION = "SPARSECTX_SLURM_PARTITION"
DEFAULT_PARTITION = "gpu"
"""The partition the profile submits to when ``SPARSECTX_SLURM_PARTITION`` is unset."""
ACCOUNT = "SPARSECTX_SLURM_ACCOUNT"
NO_ACCOUNTING = "accounting_storage/none"
NODE_LIMITS = {"gpu": "slurm_node_gpus", "cpus_per_task": "slurm_node_cpus", "mem_mb": "slurm_node_mem_mb"}
"""``grid.resources`` key -> the profile's default resource holding the partition's largest node's amount."""
NODE_UNITS = {"gpu": "GPUs", "cpus_per_task": "CPUs", "mem_mb": "MB of memory"}


def node_limits(default_resources: Any) -> dict[str, Any]:
    """Returns {default resource: value} of the ``NODE_LIMITS`` resources a profile declared, from Snakemake's
    ``workflow.resource_settings.default_resources``: a ``snakemake.resources.DefaultResources`` with its values in
    ``parsed`` (Snakemake 9.15) or a ``snakemake.resources.Resources`` mapping names to ``Resource`` objects
    (``.value``; 9.27); {} for none (no profile, or one that sets no default resources)."""
    if default_resources is None:
        return {}
    if hasattr(default_resources, "parsed"):
        parsed = default_resources.parsed
        return {name: parsed[name] for name in NODE_LIMITS.values() if name in parsed}
    # only these: another resource's value may need a rule to be computed (tmpdir, a function)
    return {name: default_resources[name].value for name in NODE_LIMITS.values() if name in default_resources}


SUBMITTED_STAGES = ("train", "evaluate", "passk", "efficiency")
"""The ``grid.resources`` stages whose rules ``sbatch`` submits; build_data and tables run where Snakemake runs
(``localrules`` in workflow/rules/tables.smk)."""

TIMEOUT_S = 10.0
"""How long a SLURM query may take: a controller answers in well under a second, but ``scontrol`` on a machine
with SLURM installed and no configuration to find (its configless DNS lookup) hangs for about a minute."""
_UNANSWERED: set[tuple[tuple[str, str], ...]] = set()
"""The environments (as sorted items) in which a SLURM command timed out during this process."""

STATUS_COMMANDS = ("sacct", "squeue")
OVERRIDE = "SPARSECTX_SLURM_STATUS_COMMAND"
SQUEUE_MIN_JOB_AGE_S = 600
"""Below this ``MinJobAge`` a finished job may leave ``squeue`` before Snakemake's next poll sees it."""


def slurm_output(command: list[str], environ: Mapping[str, str]) -> str | None:
    """Returns what a SLURM command prints, or None where it is not installed (a laptop: said nowhere, nothing to
    check) or fails (the controller down: logged, since ``sbatch`` will fail too and say why). After one command
    ran past ``TIMEOUT_S`` no other is tried in that environment: the profile's checks would each wait as long."""
    program = shutil.which(command[0], path=environ.get("PATH"))
    unanswered = tuple(sorted(environ.items()))
    if program is None or unanswered in _UNANSWERED:
        return None
    try:
        done = subprocess.run(
            [program, *command[1:]], env=dict(environ), capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        log.warning("`%s` failed (%s): the SLURM profile's settings are not checked", " ".join(command), err)
        if isinstance(err, subprocess.TimeoutExpired):
            _UNANSWERED.add(unanswered)
        return None
    if done.returncode != 0:
        log.warning(
            "`%s` failed: %s; the SLURM profile's settings are not checked", " ".join(command), done.stderr.strip()
        )
        return None
    return done.stdout


def cluster_config(environ: Mapping[str, str]) -> dict[str, str]:
    """Returns ``scontrol show config`` as {key: value}, or {} where ``scontrol`` cannot reach a controller.

    scontrol(1) prints a header line, then one ``Key = Value`` line per parameter."""
    shown = slurm_output(["scontrol", "show", "config"], environ) or ""
    pairs = (line.split("=", 1) for line in shown.splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def records(shown: str) -> list[dict[str, str]]:
    """Returns each line of ``scontrol --oneliner show ...`` as {key: value}.

    scontrol(1) ``--oneliner`` prints one record per line as space-separated ``Key=Value`` pairs; free-text values
    (``OS=Linux 5.15.0 #1 SMP``, ``Reason=bad DIMM [root@...]``) hold spaces, so only words with a ``Key=`` are
    read, which keeps every field used here (none of them holds a space)."""
    return [dict(re.findall(r"(?:^|\s)(\w+)=(\S*)", line)) for line in shown.splitlines() if line.strip()]


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


def partition_name(environ: Mapping[str, str]) -> str:
    """Returns the partition the profile submits to: ``$SPARSECTX_SLURM_PARTITION``, or ``gpu``."""
    return environ.get(PARTITION, DEFAULT_PARTITION)


def checked_partition(environ: Mapping[str, str]) -> str:
    """Returns the profile's partition (or partitions, comma-separated as ``sbatch -p`` takes them) once the
    cluster has each (``scontrol --all``: hidden ones too).

    Raises:
        ValueError: naming ``SPARSECTX_SLURM_PARTITION``, the partition the cluster lacks and those it has.
    """
    chosen = partition_name(environ)
    shown = slurm_output(["scontrol", "--all", "--oneliner", "show", "partition"], environ)
    if shown is None:
        return chosen
    existing = [record["PartitionName"] for record in records(shown) if "PartitionName" in record]
    missing = [name for name in chosen.split(",") if name not in existing]
    if missing:
        asked = (
            f"{PARTITION}={chosen!r}: this cluster has no partition {', '.join(missing)}"
            if PARTITION in environ
            else f"{PARTITION} is unset, so the profile submits to {chosen!r}, which this cluster does not have"
        )
        raise ValueError(
            f"{asked}; its partitions are {', '.join(existing)}. "
            f"Choose the GPU partition to submit to: export {PARTITION}=<one of them>"
        )
    return chosen


def checked_account(environ: Mapping[str, str]) -> str:
    """Returns ``$SPARSECTX_SLURM_ACCOUNT`` once the user holds it in SLURM's accounting database (the plugin's
    own source, ``accounts.py`` ``validate_account``: ``sacctmgr list user <user> withassoc``; account names are
    case-insensitive there). A cluster without an accounting database accepts any account, so none is checked.

    Raises:
        ValueError: naming ``SPARSECTX_SLURM_ACCOUNT``, the account and the user's accounts.
    """
    account = environ[ACCOUNT]
    storage = cluster_config(environ).get("AccountingStorageType")
    if storage == NO_ACCOUNTING:
        log.warning(
            "this cluster keeps no accounting database (AccountingStorageType=%s) and accepts any account name, "
            "so %s=%r is not checked",
            NO_ACCOUNTING,
            ACCOUNT,
            account,
        )
        return account
    user = getpass.getuser()
    command = ["sacctmgr", "--noheader", "--parsable2", "list", "user", user, "withassoc", "format=Account"]
    shown = slurm_output(command, environ) if storage else None
    held = sorted({line.strip().lower() for line in (shown or "").splitlines() if line.strip()})
    if held and account.lower() not in held:
        raise ValueError(
            f"{ACCOUNT}={account!r}: SLURM user {user} has no account {account!r}; their accounts are "
            f"{', '.join(held)}. Set {ACCOUNT} to one of them, or unset it to submit with your default account"
        )
    return account


def gpu_count(gres: str) -> int:
    """Returns the GPUs of a node's ``Gres`` field as scontrol(1) shows it: comma-separated
    ``name[:type][:count][(S:sockets)]`` entries (``gpu:4``, ``gpu:a100:4(S:0-1)``), ``(null)`` for none."""
    total = 0
    for entry in re.sub(r"\([^)]*\)", "", gres).split(","):
        fields = entry.split(":")
        if fields[0] == "gpu":
            total += int(fields[-1]) if len(fields) > 1 and fields[-1].isdigit() else 1
    return total


def node_resources(environ: Mapping[str, str]) -> dict[str, int]:
    """Returns the largest amount of each ``NODE_LIMITS`` resource one node of the profile's partition gives a
    job ({} where SLURM cannot be asked): GPUs, CPUs and memory (``CPUEfctv`` or ``CPUTot``, ``RealMemory`` of
    ``scontrol --oneliner show node``, nodes of every state), capped by the partition's ``MaxCPUsPerNode`` and
    ``MaxMemPerNode``. Each is the largest over the nodes on its own; a job that fits each but no single node
    is left to ``sbatch``, which refuses it at submission."""
    partitions = set(partition_name(environ).split(","))
    shown_partitions = slurm_output(["scontrol", "--all", "--oneliner", "show", "partition"], environ)
    shown_nodes = slurm_output(["scontrol", "--oneliner", "show", "node"], environ) if shown_partitions else None
    if shown_partitions is None or shown_nodes is None:
        return {}
    nodes = [n for n in records(shown_nodes) if partitions & set(n.get("Partitions", "").split(","))]
    if not nodes:
        return {}
    limits = [p for p in records(shown_partitions) if p.get("PartitionName") in partitions]
    largest = {
        "slurm_node_gpus": max(gpu_count(n.get("Gres", "(null)")) for n in nodes),
        "slurm_node_cpus": max(int(n.get("CPUEfctv", n.get("CPUTot", "0"))) for n in nodes),
        "slurm_node_mem_mb": max(int(n.get("RealMemory", "0")) for n in nodes),
    }
    for resource, limit in (("slurm_node_cpus", "MaxCPUsPerNode"), ("slurm_node_mem_mb", "MaxMemPerNode")):
        caps = [int(p[limit]) for p in limits if p.get(limit, "").isdigit()]
        if caps and len(caps) == len(limits):
            largest[resource] = min(largest[resource], max(caps))
    return largest


def check_job_shapes(
    resources: Mapping[str, Mapping[str, int]], node: Mapping[str, int], experiment: str, partition: str
) -> None:
    """Returns None when every submitted stage's job fits the partition's largest node (``node``, the profile's
    ``NODE_LIMITS`` default resources; {} outside the SLURM profile checks nothing). A job runs on one node
    (the train rule launches its processes inside one allocation), so a larger request can never start.

    Raises:
        ValueError: naming each ``grid.resources.<stage>.<key>=<value>`` that exceeds the node, the node's amount
            and what to change.
    """
    if not node:
        return
    too_large = [
        f"grid.resources.{stage}.{key}={resources[stage][key]} (a node has at most {node[limit]} {NODE_UNITS[key]})"
        for stage in SUBMITTED_STAGES
        if stage in resources
        for key, limit in NODE_LIMITS.items()
        if limit in node and resources[stage].get(key, 0) > node[limit]
    ]
    if too_large:
        raise ValueError(
            f"experiment {experiment}: jobs larger than any node of SLURM partition {partition!r} ({PARTITION}) "
            f"can never start: {'; '.join(too_large)}. Lower them in conf/experiment/{experiment}.yaml "
            f"(or the --configfile that sets grid.resources), or submit to a partition with larger nodes"
        )
