"""The cluster command against a real SLURM scheduler (issue 40): a single-node cluster from Debian's packages
(``sparsectx.local_slurm``), started once for the module and stopped after it.

The small study of the rerun tests (one benchmark, one pruner at one budget, a 2-step SFT run, Pass@K and
efficiency) runs through ``--profile slurm``: every GPU rule is submitted with ``sbatch`` and polled with
``squeue`` (the cluster has no accounting database, as many lab clusters), and its tables equal a local run's
(efficiency's timings aside). Skipped, with the reason, where the cluster cannot start (not root, or the
packages cannot be installed).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from faults.test_reruns import SMALL, outputs

from sparsectx import local_slurm
from sparsectx import workflow as wf
from sparsectx.workflow.slurm import status_command

pytestmark = pytest.mark.slow

ROOT = wf.REPO_DIR


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> local_slurm.LocalSlurm:
    """Returns a started local cluster (stopped after the module); skips naming why it cannot start."""
    if why := local_slurm.why_unavailable():
        pytest.skip(f"no local SLURM: {why}")
    try:
        local_slurm.install()
    except RuntimeError as err:
        pytest.skip(f"no local SLURM: the packages could not be installed ({err})")
    started = local_slurm.start(tmp_path_factory.mktemp("slurm"), gpus=4)
    yield started
    local_slurm.stop(started.root)


def test_the_profile_polls_squeue_where_the_cluster_keeps_no_accounting(cluster: local_slurm.LocalSlurm) -> None:
    assert status_command(cluster.environ()) == "squeue"
    assert status_command({**cluster.environ(), "SPARSECTX_SLURM_STATUS_COMMAND": "sacct"}) == "sacct"
    with pytest.raises(ValueError, match="SPARSECTX_SLURM_STATUS_COMMAND='qstat'"):
        status_command({**cluster.environ(), "SPARSECTX_SLURM_STATUS_COMMAND": "qstat"})


def test_a_gpu_request_is_granted_as_asked(cluster: local_slurm.LocalSlurm, tmp_path: Path) -> None:
    env = cluster.environ()
    out = tmp_path / "job.out"
    cmd = ["sbatch", "--parsable", "--wait", "--gpus=2", "-c", "1", "--mem=500", f"--output={out}"]
    done = subprocess.run([*cmd, "--wrap", "echo gpus=$SLURM_GPUS_ON_NODE"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    shown = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True, text=True).stdout
    assert "TresPerJob=gres:gpu:2" in shown and "JobState=COMPLETED" in shown, shown
    assert out.read_text().strip() == "gpus=2"


def _study(workdir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    workdir.mkdir()
    (workdir / "small.yaml").write_text(yaml.safe_dump(SMALL))
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir)]
    cmd += [*args, "all_tables", "--configfile", str(workdir / "small.yaml")]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1500, env=env, cwd=ROOT)


def test_the_cluster_command_runs_the_study_through_sbatch_to_the_local_runs_tables(
    cluster: local_slurm.LocalSlurm, tmp_path: Path
) -> None:
    env = {**cluster.environ(), "SPARSECTX_SLURM_PARTITION": cluster.partition}
    env.pop("SPARSECTX_SLURM_STATUS_COMMAND", None)
    done = _study(tmp_path / "slurm", "--profile", "slurm", env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    submitted = (done.stdout + done.stderr).count("has been submitted with SLURM jobid")
    assert submitted >= 5, done.stderr[-4000:]  # base x2, train, trained, Pass@K, efficiency (tables are local)
    local = _study(tmp_path / "local", "--workflow-profile", "none", "--cores", "2", env=dict(os.environ))
    assert local.returncode == 0, local.stderr[-4000:]
    assert outputs(tmp_path / "slurm") == outputs(tmp_path / "local")
