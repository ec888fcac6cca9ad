"""A single-node SLURM cluster on this machine, to run the cluster command for real without a cluster.

    python -m sparsectx.local_slurm start [root=/tmp/sparsectx-slurm] [gpus=4]   # prints `export SLURM_CONF=...`
    python -m sparsectx.local_slurm run [root=...] [gpus=4] -- <command...>       # start, run, stop
    python -m sparsectx.local_slurm stop [root=...]

Debian's packages (``slurm-wlm``, ``munge``; ``install`` adds them as root) give a controller and a node daemon
that run here as root: a private munge daemon and key, a generated ``slurm.conf`` with this machine's CPUs and
memory, accounting disabled (as on many small lab clusters, so the status of jobs comes from ``squeue``, which
keeps finished jobs for ``MinJobAge``), and a count-only ``gpu`` GRES so GPU requests can be submitted and
inspected (``scontrol show job``); the jobs run on the CPU. Everything lives under ``root`` except one link:
``/etc/slurm/slurm.conf`` points at the generated file while the cluster runs. Clients outside jobs find the
cluster through ``SLURM_CONF``, but inside a job snakemake-executor-plugin-slurm-jobstep removes every
``SLURM_*`` variable but the job's identity before it calls ``srun``, so ``srun`` reads the default path, as on
a real cluster. A machine whose ``/etc/slurm/slurm.conf`` is its own is refused (it has a cluster already).

A second partition, ``queued`` (``QUEUE_ONLY``), is down: it accepts jobs and never runs them, and its node
declares a GPU node's size (``node=<cpus>,<mem_mb>``; ``SlurmdParameters=config_overrides``, slurm.conf(5)), so
the real presets' jobs (32 CPUs, 256 GB, 8 GPUs) are submitted as on a cluster and what SLURM would give them is
read with ``scontrol show job``. The ``debug`` partition, where jobs run, is capped at this machine's CPUs and
memory (``MaxCPUsPerNode``, ``MaxMemPerNode``).
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("slurm-wlm", "munge")
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo")
DEFAULT_ROOT = Path("/tmp/sparsectx-slurm")
PARTITION = "debug"
QUEUE_ONLY = "queued"
"""The down partition: jobs are accepted and stay pending (slurm.conf(5), PartitionName State=DOWN)."""
MIN_JOB_AGE_S = 3600
"""How long finished jobs stay in ``squeue``: the executor plugin's squeue status needs them listed."""
CONTROLLER_PORT, NODE_PORT = 16817, 16818
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")
"""Where ``srun`` inside a job looks for the cluster (the jobstep plugin drops ``SLURM_CONF``)."""


@dataclass(frozen=True)
class LocalSlurm:
    """A started single-node cluster: its folder, config file and partition."""

    root: Path
    partition: str = PARTITION

    @property
    def conf(self) -> Path:
        """Returns the cluster's ``slurm.conf``."""
        return self.root / "slurm.conf"

    def environ(self) -> dict[str, str]:
        """Returns this process's environment with ``SLURM_CONF`` pointing at the cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}


def missing_binaries() -> list[str]:
    """Returns the SLURM and munge programs not found on ``PATH`` (or in /usr/sbin)."""
    search = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"
    return [name for name in BINARIES if shutil.which(name, path=search) is None]


def why_unavailable() -> str:
    """Returns why a local cluster cannot start here ("" when it can): not root, or the packages missing."""
    if os.geteuid() != 0:
        return "the local SLURM runs its daemons as root (slurmd starts jobs); run as root"
    if SYSTEM_CONF.exists() and not SYSTEM_CONF.is_symlink():
        return f"{SYSTEM_CONF} exists: this machine has a SLURM configuration of its own (use that cluster)"
    missing = missing_binaries()
    if missing and shutil.which("apt-get") is None:
        return f"{', '.join(missing)} not installed and no apt-get to install {' '.join(PACKAGES)}"
    return ""


def install() -> None:
    """Returns None once the SLURM and munge programs are present, installing Debian's packages if needed.

    Raises:
        RuntimeError: naming the packages and apt-get's output when the install fails.
    """
    if not missing_binaries():
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *PACKAGES]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"`{' '.join(cmd)}` failed ({done.returncode}): {done.stderr[-2000:]}")
    if missing := missing_binaries():
        raise RuntimeError(f"{', '.join(missing)} still missing after installing {' '.join(PACKAGES)}")


def _sbin(name: str) -> str:
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin") or name


def memory_mb() -> int:
    """Returns the memory this node offers jobs: 90% of MemTotal (the rest for the daemons and the OS)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(int(line.split()[1]) * 0.9 / 1024)
    raise RuntimeError("no MemTotal in /proc/meminfo")


def slurm_conf(root: Path, host: str, cpus: int, mem_mb: int, gpus: int, node: tuple[int, int] | None = None) -> str:
    """Returns the ``slurm.conf`` of a one-node cluster whose state, spool, logs and munge socket are in ``root``.

    The node has ``cpus`` and ``mem_mb`` (this machine's), or declares ``node`` = (CPUs, MB) when given, which
    slurmd then takes as configured (``config_overrides``) and only the ``queued`` partition may use.
    """
    gres = f" Gres=gpu:{gpus}" if gpus else ""
    declared_cpus, declared_mem = node or (cpus, mem_mb)
    overrides = ["SlurmdParameters=config_overrides"] if node else []
    return "\n".join(
        [
            "ClusterName=sparsectx-local",
            f"SlurmctldHost={host}(127.0.0.1)",
            "SlurmUser=root",
            f"AuthInfo=socket={root / 'munge' / 'munge.socket'}",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
            f"SlurmctldPort={CONTROLLER_PORT}",
            f"SlurmdPort={NODE_PORT}",
            "ProctrackType=proctrack/linuxproc",  # no cgroups needed (containers, CI)
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",  # no slurmdbd: sacct knows no jobs
            f"MinJobAge={MIN_JOB_AGE_S}",
            "ReturnToService=2",
            "MpiDefault=none",
            "GresTypes=gpu",
            *overrides,
            f"NodeName={host} NodeAddr=127.0.0.1 CPUs={declared_cpus} RealMemory={declared_mem}{gres} State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes={host} Default=YES MaxTime=INFINITE State=UP "
            f"MaxCPUsPerNode={cpus} MaxMemPerNode={mem_mb}",
            f"PartitionName={QUEUE_ONLY} Nodes={host} MaxTime=INFINITE State=DOWN",
            "",
        ]
    )


def fake_gpus(root: Path, count: int) -> str:
    """Returns the ``gres.conf`` line of ``count`` GPUs backed by character devices in ``root`` (copies of
    /dev/null: SLURM's gpu plugin drops file-less GPUs, and only counts them here)."""
    devices = root / "gpus"
    devices.mkdir(exist_ok=True)
    for index in range(count):
        node = devices / f"gpu{index}"
        if not node.exists():
            os.mknod(node, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    return f"AutoDetect=off\nNodeName={socket.gethostname()} Name=gpu File={devices}/gpu[0-{count - 1}]\n"


def _start_munge(root: Path) -> None:
    folder = root / "munge"
    folder.mkdir(mode=0o700, exist_ok=True)
    key = folder / "munge.key"
    if not key.exists():
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
    cmd = [
        _sbin("munged"),
        "--force",  # munged refuses root by default; the daemon serves this cluster only
        f"--socket={folder / 'munge.socket'}",
        f"--key-file={key}",
        f"--pid-file={folder / 'munged.pid'}",
        f"--log-file={root / 'log' / 'munged.log'}",
        f"--seed-file={folder / 'seed'}",
    ]
    subprocess.run(cmd, check=True, capture_output=True)


def start(
    root: Path = DEFAULT_ROOT, gpus: int = 4, timeout_s: float = 60.0, node: tuple[int, int] | None = None
) -> LocalSlurm:
    """Returns the cluster in ``root`` once its node is idle: munge, slurmctld and slurmd started there; the node
    declares ``node`` = (CPUs, MB) for the ``queued`` partition when given (``slurm_conf``).

    Raises:
        RuntimeError: naming why it cannot start (``why_unavailable``), or the daemon logs when the node does
            not come up within ``timeout_s``.
    """
    if why := why_unavailable():
        raise RuntimeError(f"cannot start a local SLURM: {why}")
    install()
    stop(root)
    root = root.resolve()
    for sub in ("state", "spool", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    cluster = LocalSlurm(root)
    cluster.conf.write_text(slurm_conf(root, socket.gethostname(), os.cpu_count() or 1, memory_mb(), gpus, node))
    (root / "gres.conf").write_text(fake_gpus(root, gpus) if gpus else "AutoDetect=off\n")
    SYSTEM_CONF.parent.mkdir(parents=True, exist_ok=True)
    SYSTEM_CONF.unlink(missing_ok=True)  # a link left by a cluster that was not stopped (why_unavailable)
    SYSTEM_CONF.symlink_to(cluster.conf)
    _start_munge(root)
    env = cluster.environ()
    subprocess.run([_sbin("slurmctld"), "-i"], env=env, check=True, capture_output=True)  # -i: no old state
    subprocess.run([_sbin("slurmd")], env=env, check=True, capture_output=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True, check=False)
        if state.stdout.strip() in ("idle", "mix", "alloc"):
            return cluster
        time.sleep(0.5)
    logs = "\n".join((root / "log" / name).read_text()[-1500:] for name in ("slurmctld.log", "slurmd.log"))
    stop(root)
    raise RuntimeError(f"the local SLURM node did not come up in {timeout_s:.0f} s; its logs:\n{logs}")


def _kill_pidfile(pidfile: Path) -> None:
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return
    for _ in range(100):  # up to 10 s for the daemon to exit
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def stop(root: Path = DEFAULT_ROOT) -> None:
    """Returns None after cancelling every job of the cluster in ``root`` and stopping its daemons (if any)."""
    conf = root / "slurm.conf"
    if conf.is_file():
        env = {**os.environ, "SLURM_CONF": str(conf)}
        for partition in (PARTITION, QUEUE_ONLY):
            cancel = ["scancel", "--full", "--partition", partition]
            subprocess.run(cancel, env=env, capture_output=True, check=False)
    for pidfile in (root / "slurmd.pid", root / "slurmctld.pid", root / "munge" / "munged.pid"):
        _kill_pidfile(pidfile)
    if SYSTEM_CONF.is_symlink() and SYSTEM_CONF.resolve() == conf.resolve():
        SYSTEM_CONF.unlink()


def _options(args: Sequence[str]) -> tuple[Path, int]:
    values = dict(arg.split("=", 1) for arg in args if "=" in arg)
    unknown = sorted(set(values) - {"root", "gpus"})
    if unknown:
        raise SystemExit(f"unknown option(s) {unknown}; use root=<folder> gpus=<count>")
    return Path(values.get("root", DEFAULT_ROOT)), int(values.get("gpus", 4))


def main(argv: Sequence[str] | None = None) -> int:
    """Returns the exit status of ``start``, ``stop`` or ``run -- <command>`` (the command's own status)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("start", "stop", "run"):
        print(__doc__, file=sys.stderr)
        return 2
    action, rest = args[0], args[1:]
    command = rest[rest.index("--") + 1 :] if "--" in rest else []
    root, gpus = _options(rest[: rest.index("--")] if "--" in rest else rest)
    if action == "stop":
        stop(root)
        return 0
    cluster = start(root, gpus)
    if action == "start":
        print(
            f"export SLURM_CONF={cluster.conf}  # partition {cluster.partition}; "
            "stop it with: python -m sparsectx.local_slurm stop"
        )
        return 0
    if not command:
        raise SystemExit("run needs a command after --")
    try:
        return subprocess.run(command, env=cluster.environ(), check=False).returncode
    finally:
        stop(root)


if __name__ == "__main__":
    raise SystemExit(main())
