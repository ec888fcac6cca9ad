"""The SLURM profile's settings checked against the cluster before anything is queued (issue 40, "Bad input").

A partition or account that does not exist (``SPARSECTX_SLURM_PARTITION``, ``SPARSECTX_SLURM_ACCOUNT``) fails when
``--profile slurm`` is loaded, and a job larger than the partition's largest node (``grid.resources``) fails when
the Snakefile is parsed: both before ``snakemake -n`` lists a job, each naming the setting, the bad value and
what the cluster has. Fake ``scontrol`` and ``sacctmgr`` scripts on ``PATH`` print what SLURM 22.05 prints (the
layouts of scontrol(1) ``--oneliner show node|partition`` and ``show config``, and sacctmgr(1) ``--parsable2``);
where no SLURM command is installed (a laptop's dry run) nothing is checked.
"""

from __future__ import annotations

import getpass
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sparsectx import workflow as wf
from sparsectx.workflow import slurm

ROOT = wf.REPO_DIR

# scontrol(1): `scontrol --oneliner show node`, one record per line. The first line is the local cluster's node as
# scontrol 22.05.8 printed it (sparsectx.local_slurm, gpus=4); the others are GPU nodes of a lab cluster: a typed
# GRES with its socket binding, two GPU types on one node, and a CPU node without GRES.
NODES = (
    "NodeName=vm Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=1.68 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:4 NodeAddr=127.0.0.1 NodeHostName=vm "
    "Version=22.05.8 OS=Linux 6.18.44-fc-v1272 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=21694 AllocMem=0 "
    "FreeMem=9501 Sockets=2 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A "
    "MCS_label=N/A Partitions=debug  BootTime=2026-12-05T23:44:40 SlurmdStartTime=2026-12-06T09:32:09 "
    "LastBusyTime=2026-12-06T09:34:26 CfgTRES=cpu=2,mem=21694M,billing=2 AllocTRES= CapWatts=n/a "
    "CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s\n"
    "NodeName=gpu01 Arch=x86_64 CoresPerSocket=32  CPUAlloc=0 CPUEfctv=64 CPUTot=64 CPULoad=0.05 "
    "AvailableFeatures=a100 ActiveFeatures=a100 Gres=gpu:a100:4(S:0-1) NodeAddr=gpu01 NodeHostName=gpu01 "
    "Version=22.05.8 OS=Linux 5.15.0-91-generic #101-Ubuntu SMP Tue Nov 14 13:30:08 UTC 2023  "
    "RealMemory=515000 AllocMem=0 FreeMem=509211 Sockets=2 Boards=1 State=IDLE ThreadsPerCore=1 "
    "TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu,hidden  BootTime=2026-11-30T08:00:00 "
    "SlurmdStartTime=2026-11-30T08:01:00 LastBusyTime=2026-12-06T09:00:00 "
    "CfgTRES=cpu=64,mem=515000M,billing=64,gres/gpu=4 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 "
    "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s\n"
    "NodeName=gpu02 Arch=x86_64 CoresPerSocket=16  CPUAlloc=0 CPUEfctv=32 CPUTot=32 CPULoad=0.01 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:v100:2(S:0),gpu:t4:1(S:1) NodeAddr=gpu02 "
    "NodeHostName=gpu02 Version=22.05.8 OS=Linux 5.15.0-91-generic #101-Ubuntu SMP Tue Nov 14 13:30:08 "
    "UTC 2023  RealMemory=257000 AllocMem=0 FreeMem=250000 Sockets=2 Boards=1 State=DOWN+DRAIN "
    "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  "
    "BootTime=2026-11-30T08:00:00 SlurmdStartTime=2026-11-30T08:01:00 LastBusyTime=2026-12-06T09:00:00 "
    "CfgTRES=cpu=32,mem=257000M,billing=32,gres/gpu=3 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 "
    "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=bad DIMM "
    "[root@2026-12-01T10:00:00]\n"
    "NodeName=cpu01 Arch=x86_64 CoresPerSocket=64  CPUAlloc=0 CPUEfctv=128 CPUTot=128 CPULoad=0.00 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=cpu01 NodeHostName=cpu01 "
    "Version=22.05.8 OS=Linux 5.15.0-91-generic #101-Ubuntu SMP Tue Nov 14 13:30:08 UTC 2023  "
    "RealMemory=1030000 AllocMem=0 FreeMem=1000000 Sockets=2 Boards=1 State=IDLE ThreadsPerCore=1 "
    "TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=cpu  BootTime=2026-11-30T08:00:00 "
    "SlurmdStartTime=2026-11-30T08:01:00 LastBusyTime=2026-12-06T09:00:00 "
    "CfgTRES=cpu=128,mem=1030000M,billing=128 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 "
    "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s\n"
)

# scontrol(1): `scontrol --all --oneliner show partition`; `debug` as the local cluster's scontrol 22.05.8 printed
# it, `gpu` with a per-node memory limit below its nodes' RealMemory, `hidden` configured Hidden=YES.
PARTITIONS = (
    "PartitionName=debug AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES "
    "QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO "
    "MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=vm "
    "PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE "
    "PreemptMode=OFF State=UP TotalCPUs=2 TotalNodes=1 SelectTypeParameters=NONE JobDefaults=(null) "
    "DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=2,mem=21694M,node=1,billing=2\n"
    "PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A "
    "DefaultTime=01:00:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED "
    "MaxTime=2-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=48 Nodes=gpu[01-02] PriorityJobFactor=1 "
    "PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP "
    "TotalCPUs=96 TotalNodes=2 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED "
    "MaxMemPerNode=400000 TRES=cpu=96,mem=772000M,node=2,billing=96,gres/gpu=7\n"
    "PartitionName=cpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A "
    "DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED "
    "MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=cpu01 PriorityJobFactor=1 "
    "PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP "
    "TotalCPUs=128 TotalNodes=1 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED "
    "MaxMemPerNode=UNLIMITED TRES=cpu=128,mem=1030000M,node=1,billing=128\n"
    "PartitionName=hidden AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=NO "
    "QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=YES "
    "MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=gpu01 "
    "PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE "
    "PreemptMode=OFF State=UP TotalCPUs=64 TotalNodes=1 SelectTypeParameters=NONE JobDefaults=(null) "
    "DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED "
    "TRES=cpu=64,mem=515000M,node=1,billing=64,gres/gpu=4\n"
)


def show_config(storage: str) -> str:
    """Returns ``scontrol show config`` as SLURM 22.05.8 prints it (header, ``Key = Value`` lines, ping line)."""
    return (
        "Configuration data as of 2026-12-06T09:38:08\n"
        "AccountingStorageBackupHost = (null)\n"
        "AccountingStorageEnforce = associations,limits\n"
        "AccountingStorageHost   = localhost\n"
        f"AccountingStorageType   = {storage}\n"
        "ClusterName             = lab\n"
        "MinJobAge               = 3600 sec\n"
        "\n"
        "Slurmctld(primary) at head is UP\n"
    )


# sacctmgr(1): `sacctmgr --noheader --parsable2 list user <name> withassoc format=Account`: one account per
# association, '|'-delimited columns without a trailing '|' (here one column).
ACCOUNTS = "proj-vision\nproj-vision\nteaching\n"


def fake_slurm(folder: Path, storage: str = "accounting_storage/slurmdbd", up: bool = True) -> dict[str, str]:
    """Returns an environment whose ``PATH`` finds fake ``scontrol`` and ``sacctmgr`` first, printing the fixtures
    above (a controller that is down makes ``scontrol`` fail as the real one does)."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in {"nodes": NODES, "partitions": PARTITIONS, "config": show_config(storage)}.items():
        (folder / f"{name}.txt").write_text(text)
    (folder / "accounts.txt").write_text(ACCOUNTS)
    down = "echo 'slurm_load_partitions: Unable to contact slurm controller (connect failure)' >&2; exit 1"
    scontrol = f"""#!/bin/sh
{"" if up else down}
case "$*" in
  "show config") cat {folder}/config.txt ;;
  "--all --oneliner show partition") cat {folder}/partitions.txt ;;
  "--oneliner show node") cat {folder}/nodes.txt ;;
  *) echo "fake scontrol: unexpected arguments $*" >&2; exit 2 ;;
esac
"""
    sacctmgr = f"""#!/bin/sh
[ "$*" = "--noheader --parsable2 list user {getpass.getuser()} withassoc format=Account" ] || exit 2
cat {folder}/accounts.txt
"""
    for name, script in {"scontrol": scontrol, "sacctmgr": sacctmgr}.items():
        (bin_dir / name).write_text(script)
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARSECTX_SLURM_", "SLURM_"))}
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_an_existing_partition_passes_and_a_missing_one_names_the_variable_and_the_partitions(tmp_path: Path) -> None:
    env = fake_slurm(tmp_path)
    assert slurm.checked_partition({**env, "SPARSECTX_SLURM_PARTITION": "debug"}) == "debug"
    assert slurm.checked_partition({**env, "SPARSECTX_SLURM_PARTITION": "hidden"}) == "hidden"
    assert slurm.checked_partition(env) == "gpu"  # the profile's default when the variable is unset
    with pytest.raises(ValueError) as raised:
        slurm.checked_partition({**env, "SPARSECTX_SLURM_PARTITION": "a100"})
    message = str(raised.value)
    assert "SPARSECTX_SLURM_PARTITION='a100'" in message
    assert "debug, gpu, cpu, hidden" in message and "export SPARSECTX_SLURM_PARTITION=" in message


def test_the_default_partition_missing_says_the_variable_is_unset(tmp_path: Path) -> None:
    env = fake_slurm(tmp_path)
    (tmp_path / "partitions.txt").write_text(PARTITIONS.splitlines()[0] + "\n")  # the local cluster: debug only
    with pytest.raises(ValueError, match=r"SPARSECTX_SLURM_PARTITION is unset.*'gpu'.*partitions are debug"):
        slurm.checked_partition(env)


def test_an_account_the_user_lacks_names_the_variable_and_the_users_accounts(tmp_path: Path) -> None:
    env = fake_slurm(tmp_path)
    assert slurm.checked_account({**env, "SPARSECTX_SLURM_ACCOUNT": "Teaching"}) == "Teaching"
    with pytest.raises(ValueError) as raised:
        slurm.checked_account({**env, "SPARSECTX_SLURM_ACCOUNT": "proj-nlp"})
    message = str(raised.value)
    assert "SPARSECTX_SLURM_ACCOUNT='proj-nlp'" in message and "proj-vision, teaching" in message
    assert "unset it" in message


def test_accounts_are_not_checked_where_the_cluster_keeps_no_accounting_database(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = fake_slurm(tmp_path, storage="accounting_storage/none")
    with caplog.at_level(logging.WARNING, logger=slurm.__name__):
        assert slurm.checked_account({**env, "SPARSECTX_SLURM_ACCOUNT": "proj-nlp"}) == "proj-nlp"
    assert "AccountingStorageType=accounting_storage/none" in caplog.text
    assert "SPARSECTX_SLURM_ACCOUNT='proj-nlp' is not checked" in caplog.text


def test_the_partitions_largest_node_is_read_from_scontrol(tmp_path: Path) -> None:
    env = fake_slurm(tmp_path)
    assert slurm.node_resources({**env, "SPARSECTX_SLURM_PARTITION": "debug"}) == {
        "slurm_node_gpus": 4,
        "slurm_node_cpus": 2,
        "slurm_node_mem_mb": 21694,
    }
    # gpu: the a100 node's 4 GPUs (the down node's v100+t4 count 3); 64 CPUs and 515000 MB capped by the
    # partition's MaxCPUsPerNode=48 and MaxMemPerNode=400000
    gpu = slurm.node_resources({**env, "SPARSECTX_SLURM_PARTITION": "gpu"})
    assert gpu == {"slurm_node_gpus": 4, "slurm_node_cpus": 48, "slurm_node_mem_mb": 400000}
    cpu = slurm.node_resources({**env, "SPARSECTX_SLURM_PARTITION": "cpu"})
    assert cpu == {"slurm_node_gpus": 0, "slurm_node_cpus": 128, "slurm_node_mem_mb": 1030000}


def test_nothing_is_checked_without_slurm_commands_or_a_controller(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    laptop = {**fake_slurm(tmp_path / "laptop"), "PATH": str(tmp_path / "empty")}
    assert slurm.checked_partition({**laptop, "SPARSECTX_SLURM_PARTITION": "nope"}) == "nope"
    assert slurm.checked_account({**laptop, "SPARSECTX_SLURM_ACCOUNT": "nope"}) == "nope"
    assert slurm.node_resources(laptop) == {}
    down = {**fake_slurm(tmp_path / "down", up=False), "SPARSECTX_SLURM_PARTITION": "nope"}
    with caplog.at_level(logging.WARNING, logger=slurm.__name__):
        assert slurm.checked_partition(down) == "nope"
    assert "Unable to contact slurm controller" in caplog.text and "not checked" in caplog.text


def test_a_controller_that_does_not_answer_costs_one_timeout_not_one_per_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {**fake_slurm(tmp_path), "SPARSECTX_SLURM_PARTITION": "nope", "SPARSECTX_SLURM_ACCOUNT": "nope"}
    calls = tmp_path / "calls"
    # scontrol without a reachable configuration (SLURM's configless lookup) hangs for about a minute, as here
    (tmp_path / "bin" / "scontrol").write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec sleep 5\n')
    monkeypatch.setattr(slurm, "TIMEOUT_S", 0.5)
    assert slurm.status_command(env) == "sacct"
    assert slurm.checked_partition(env) == "nope"
    assert slurm.checked_account(env) == "nope"
    assert slurm.node_resources(env) == {}
    assert calls.read_text().splitlines() == ["show config"]


RESOURCES = {
    "build_data": {"gpu": 0, "mem_mb": 8000, "runtime": 60, "cpus_per_task": 2},
    "train": {"gpu": 8, "mem_mb": 480000, "runtime": 2880, "cpus_per_task": 64},
    "evaluate": {"gpu": 1, "mem_mb": 64000, "runtime": 480, "cpus_per_task": 8},
    "passk": {"gpu": 1, "mem_mb": 64000, "runtime": 1440, "cpus_per_task": 8},
    "efficiency": {"gpu": 1, "mem_mb": 64000, "runtime": 180, "cpus_per_task": 8},
    "tables": {"gpu": 0, "mem_mb": 2000000, "runtime": 30, "cpus_per_task": 1},  # a local rule: not submitted
}


def test_a_job_larger_than_the_largest_node_names_each_setting_and_the_node() -> None:
    node = {"slurm_node_gpus": 4, "slurm_node_cpus": 48, "slurm_node_mem_mb": 400000}
    with pytest.raises(ValueError) as raised:
        slurm.check_job_shapes(RESOURCES, node, "ltopd_qwen3_5_4b", "gpu")
    message = str(raised.value)
    assert "grid.resources.train.gpu=8" in message and "4 GPUs" in message
    assert "grid.resources.train.mem_mb=480000" in message and "400000 MB" in message
    assert "grid.resources.train.cpus_per_task=64" in message and "48 CPUs" in message
    assert "conf/experiment/ltopd_qwen3_5_4b.yaml" in message and "SPARSECTX_SLURM_PARTITION" in message
    assert "tables" not in message and "evaluate" not in message
    roomy = {"slurm_node_gpus": 8, "slurm_node_cpus": 64, "slurm_node_mem_mb": 515000}
    slurm.check_job_shapes(RESOURCES, roomy, "ltopd_qwen3_5_4b", "gpu")
    slurm.check_job_shapes(RESOURCES, {}, "ltopd_qwen3_5_4b", "gpu")  # not under the SLURM profile


def _dry_run(workdir: Path, env: dict[str, str], *config: str) -> subprocess.CompletedProcess[str]:
    workdir.mkdir()
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir)]
    cmd += ["--profile", "slurm", "-n", "all_tables", "--config", "experiment=tiny", *config]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)


def test_the_profile_refuses_a_missing_partition_or_account_before_the_dry_run(tmp_path: Path) -> None:
    env = fake_slurm(tmp_path / "slurm")
    bad_partition = _dry_run(tmp_path / "p", {**env, "SPARSECTX_SLURM_PARTITION": "a100"})
    assert bad_partition.returncode != 0 and "Job stats" not in bad_partition.stdout
    assert "SPARSECTX_SLURM_PARTITION='a100'" in bad_partition.stderr, bad_partition.stderr[-2000:]
    account = {**env, "SPARSECTX_SLURM_PARTITION": "debug", "SPARSECTX_SLURM_ACCOUNT": "proj-nlp"}
    bad_account = _dry_run(tmp_path / "a", account)
    assert bad_account.returncode != 0 and "Job stats" not in bad_account.stdout
    assert "SPARSECTX_SLURM_ACCOUNT='proj-nlp'" in bad_account.stderr, bad_account.stderr[-2000:]


def test_the_dry_run_refuses_a_gpu_request_larger_than_the_partitions_nodes(tmp_path: Path) -> None:
    env = {**fake_slurm(tmp_path / "slurm"), "SPARSECTX_SLURM_PARTITION": "debug"}
    resources = wf.load_yaml(wf.CONF_DIR / "experiment" / "tiny.yaml")["grid"]["resources"]
    config = tmp_path / "big.yaml"
    config.write_text(yaml.safe_dump({"grid": {"resources": {**resources, "train": {**resources["train"], "gpu": 8}}}}))
    ok = _dry_run(tmp_path / "ok", env)
    assert ok.returncode == 0 and "Job stats" in ok.stdout, ok.stderr[-2000:]
    too_big = _dry_run(tmp_path / "big", env, "--configfile", str(config))
    assert too_big.returncode != 0 and "Job stats" not in too_big.stdout
    said = too_big.stdout + too_big.stderr  # Snakemake prints a Snakefile's error on stdout
    assert "grid.resources.train.gpu=8" in said and "at most 4 GPUs" in said, said[-2000:]


def test_the_node_limits_are_read_from_either_snakemake_default_resources_type() -> None:
    """Snakemake 9.15 hands the Snakefile a ``DefaultResources`` (values in ``parsed``), 9.27 a ``Resources``
    mapping of ``Resource`` objects; the pin admits both, and CI installs the older."""
    from types import SimpleNamespace

    from sparsectx.workflow.slurm import NODE_LIMITS, node_limits

    declared = {"slurm_node_gpus": 8, "slurm_node_cpus": 64, "slurm_node_mem_mb": 512000}
    older = SimpleNamespace(parsed={**declared, "mem_mb": 16000, "_cores": 1})
    newer = {name: SimpleNamespace(value=value) for name, value in {**declared, "runtime": 60}.items()}
    assert node_limits(older) == node_limits(newer) == declared
    assert set(declared) == set(NODE_LIMITS.values())
    assert node_limits(None) == {} and node_limits(SimpleNamespace(parsed={"mem_mb": 1})) == {}
