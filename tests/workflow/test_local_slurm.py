"""The cluster command against a real SLURM scheduler (issue 40): a single-node cluster from Debian's packages
(``sparsectx.local_slurm``), started once for the module and stopped after it.

The small study of the rerun tests (one benchmark, one pruner at one budget, a 2-step SFT run, Pass@K and
efficiency) runs through ``--profile slurm``: every GPU rule is submitted with ``sbatch`` and polled with
``squeue`` (the cluster has no accounting database, as many lab clusters), and its tables equal a local run's
(efficiency's timings aside). Skipped, with the reason, where the cluster cannot start (not root, or the
packages cannot be installed).
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from faults.test_reruns import SMALL, outputs
from user_files import write_user_files

from sparsectx import local_slurm
from sparsectx import workflow as wf
from sparsectx.workflow.slurm import status_command

pytestmark = pytest.mark.slow

ROOT = wf.REPO_DIR


GPUS, GPU_NODE = 8, (64, 512_000)
"""The local node's count-only GPUs and the size it declares to the ``queued`` partition (CPUs, MB): a GPU node's,
so the real presets' jobs are accepted as on a cluster (``debug``, where jobs run, keeps this machine's size)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> local_slurm.LocalSlurm:
    """Returns a started local cluster (stopped after the module); skips naming why it cannot start."""
    if why := local_slurm.why_unavailable():
        pytest.skip(f"no local SLURM: {why}")
    try:
        local_slurm.install()
    except RuntimeError as err:
        pytest.skip(f"no local SLURM: the packages could not be installed ({err})")
    started = local_slurm.start(tmp_path_factory.mktemp("slurm"), gpus=GPUS, node=GPU_NODE)
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


TRAIN_STEPS = 60
"""The small study's training, long enough to be cancelled mid-run; it saves only when stopped (save_every)."""

LONGER = {**SMALL, "hydra_overrides": {**SMALL["hydra_overrides"]}}
LONGER["hydra_overrides"]["train"] = [
    *(o for o in SMALL["hydra_overrides"]["train"] if not o.startswith(("steps=", "save_every="))),
    f"steps={TRAIN_STEPS}",
    f"save_every={10 * TRAIN_STEPS}",
]
TRAIN_LOG = "logs/train/tiny/tiny/sft/visionzip/0.1.log"


def _study(workdir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Returns the running small study (``LONGER``) in ``workdir`` with Snakemake ``args``; output in
    ``workdir/snakemake.out``."""
    workdir.mkdir()
    (workdir / "small.yaml").write_text(yaml.safe_dump(LONGER))
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir)]
    cmd += [*args, "all_tables", "--configfile", str(workdir / "small.yaml")]
    out = (workdir / "snakemake.out").open("w")
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)


def _finish(study: subprocess.Popen[str], workdir: Path) -> str:
    """Returns what the study printed once it ended with exit status 0 (fails with its tail otherwise)."""
    status = study.wait(timeout=1500)
    printed = (workdir / "snakemake.out").read_text()
    assert status == 0, printed[-4000:]
    return printed


def _cancel_training_after(step: int, study: subprocess.Popen[str], workdir: Path, env: dict[str, str]) -> None:
    """Returns once ``scancel`` has stopped the study's SLURM training job after it logged ``step``."""
    log, deadline = workdir / TRAIN_LOG, time.monotonic() + 900
    while not (log.is_file() and f"step {step}/{TRAIN_STEPS}" in log.read_text()):
        assert study.poll() is None and time.monotonic() < deadline, "the training job never reached the step"
        time.sleep(0.2)
    # the executor plugin comments each job with its rule (submit_string.py get_submit_command: --comment rule_...)
    queue = subprocess.run(["squeue", "-h", "-o", "%i %T %k"], env=env, capture_output=True, text=True).stdout
    (job,) = [line.split()[0] for line in queue.splitlines() if line.split()[2].startswith("rule_train")]
    assert subprocess.run(["scancel", job], env=env).returncode == 0


def test_the_cluster_command_runs_the_study_through_sbatch_to_the_local_runs_tables(
    cluster: local_slurm.LocalSlurm, tmp_path: Path
) -> None:
    """Through sbatch, with the training job cancelled mid-run (``scancel``): the profile's retry resubmits it,
    the trainer resumes from the state it saved on SLURM's SIGTERM, and the tables equal an uncancelled local run's."""
    env = {**cluster.environ(), "SPARSECTX_SLURM_PARTITION": cluster.partition}
    env.pop("SPARSECTX_SLURM_STATUS_COMMAND", None)
    study = _study(tmp_path / "slurm", "--profile", "slurm", env=env)
    _cancel_training_after(10, study, tmp_path / "slurm", env)
    printed = _finish(study, tmp_path / "slurm")
    assert printed.count("has been submitted with SLURM jobid") >= 6  # base x2, train x2, trained, Pass@K, efficiency
    assert "SLURM status is: 'CANCELLED'" in printed
    resumed = re.search(r"resumed \S+ at step (\d+)", (tmp_path / "slurm" / TRAIN_LOG).read_text())
    assert resumed and 10 <= int(resumed[1]) < TRAIN_STEPS  # saved on the cancel, not by save_every
    local = _study(tmp_path / "local", "--workflow-profile", "none", "--cores", "2", env=dict(os.environ))
    _finish(local, tmp_path / "local")
    assert outputs(tmp_path / "slurm") == outputs(tmp_path / "local")


@pytest.mark.slurm_long
def test_a_training_job_saves_on_slurms_early_signal_and_its_retry_resumes(
    cluster: local_slurm.LocalSlurm, tmp_path: Path
) -> None:
    """A training job several times longer than its 3-minute limit: the train rule asks for SIGTERM 60 s before it
    (``flat_resources``: ``--signal=TERM@60``; SLURM may send it up to 60 s earlier, sbatch(1)), the trainer saves
    and exits, the job fails before its limit, and the retries resume until training ends. ``make test-slurm``."""
    steps = 1500  # 0.17 to 0.35 s a step on one CPU core here: 4 to 9 minutes, over the 3-minute limit
    study = copy.deepcopy(LONGER)
    study["hydra_overrides"]["train"] += [f"steps={steps}", f"save_every={10 * steps}"]
    resources = wf.load_yaml(wf.CONF_DIR / "experiment" / "tiny.yaml")["grid"]["resources"]
    resources["train"]["runtime"] = 3
    study["grid"] = {**study["grid"], "resources": resources}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    env = {**cluster.environ(), "SPARSECTX_SLURM_PARTITION": cluster.partition}
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path)]
    cmd += ["--profile", "slurm", "--retries", "8", "train_all", "--configfile", str(tmp_path / "study.yaml")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3000, env=env, cwd=ROOT)
    printed = done.stdout + done.stderr
    assert done.returncode == 0, printed[-4000:]
    assert "slurm_extra=--signal=TERM@60" in printed
    # stopped by the signal (the trainer exits 143: FAILED), not killed at the limit (TIMEOUT)
    assert "SLURM status is: 'FAILED'" in printed, printed[-4000:]
    resumed = re.search(r"resumed \S+ at step (\d+)", (tmp_path / TRAIN_LOG).read_text())
    assert resumed and 0 < int(resumed[1]) < steps  # saved on the signal: save_every is past the end


def _dry_run(workdir: Path, env: dict[str, str], train: dict[str, int] | None = None) -> str:
    """Returns ``rc=<exit status>`` and what ``snakemake --profile slurm -n`` printed for the small study, its
    train jobs' ``grid.resources`` updated by ``train``."""
    resources = wf.load_yaml(wf.CONF_DIR / "experiment" / "tiny.yaml")["grid"]["resources"]
    resources["train"].update(train or {})
    workdir.mkdir()
    (workdir / "study.yaml").write_text(yaml.safe_dump({**SMALL, "grid": {**SMALL["grid"], "resources": resources}}))
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir)]
    cmd += ["--profile", "slurm", "-n", "all_tables", "--configfile", str(workdir / "study.yaml")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    return f"rc={done.returncode}\n{done.stdout}{done.stderr}"


def test_a_partition_or_job_the_cluster_lacks_stops_the_dry_run_naming_the_setting(
    cluster: local_slurm.LocalSlurm, tmp_path: Path
) -> None:
    env = {**cluster.environ(), "SPARSECTX_SLURM_PARTITION": cluster.partition}
    env.pop("SPARSECTX_SLURM_ACCOUNT", None)
    fits = _dry_run(tmp_path / "fits", env)
    assert fits.startswith("rc=0") and "Job stats" in fits, fits[-3000:]
    assert f"slurm_node_gpus={GPUS}" in fits  # the node's count-only GRES, read by the profile
    no_partition = _dry_run(tmp_path / "partition", {**env, "SPARSECTX_SLURM_PARTITION": "a100"})
    assert not no_partition.startswith("rc=0") and "Job stats" not in no_partition
    said = "SPARSECTX_SLURM_PARTITION='a100': this cluster has no partition a100; its partitions are"
    assert f"{said} {cluster.partition}, {local_slurm.QUEUE_ONLY}." in no_partition, no_partition[-3000:]
    too_big = _dry_run(tmp_path / "big", env, train={"gpu": GPUS + 1, "cpus_per_task": 512})
    assert not too_big.startswith("rc=0") and "Job stats" not in too_big
    assert f"grid.resources.train.gpu={GPUS + 1} (a node has at most {GPUS} GPUs)" in too_big, too_big[-3000:]
    assert f"grid.resources.train.cpus_per_task=512 (a node has at most {os.cpu_count()} CPUs)" in too_big


def test_an_account_is_not_checked_on_a_cluster_without_accounting_and_says_so(
    cluster: local_slurm.LocalSlurm, tmp_path: Path
) -> None:
    env = {**cluster.environ(), "SPARSECTX_SLURM_PARTITION": cluster.partition, "SPARSECTX_SLURM_ACCOUNT": "nosuch"}
    said = _dry_run(tmp_path / "account", env)
    assert said.startswith("rc=0") and "Job stats" in said, said[-3000:]
    assert "AccountingStorageType=accounting_storage/none" in said
    assert "SPARSECTX_SLURM_ACCOUNT='nosuch' is not checked" in said


def _submit_held(
    workdir: Path, env: dict[str, str], experiment: str, targets: list[str]
) -> dict[str, tuple[str, dict[str, str]]]:
    """Returns {target: (its ``sbatch`` call, ``scontrol show job``'s fields)} once ``--profile slurm`` submitted
    ``targets`` of ``experiment`` to the ``queued`` partition (accepted, never run), the study's local jobs (plan,
    preflight) standing as done; the jobs are cancelled after, and Snakemake ends on their failure."""
    write_user_files(workdir, experiment)
    grid = wf.load_grid(experiment)
    for done in (grid.plan_output(), grid.preflight_output()):  # newer than the user's files: up to date
        (workdir / done).parent.mkdir(parents=True, exist_ok=True)
        (workdir / done).write_text("")
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir)]
    cmd += ["--profile", "slurm", "--verbose", "--retries", "0", *targets]
    cmd += ["--rerun-triggers", "mtime", "--config", f"experiment={experiment}"]  # both take several values
    out = workdir / "snakemake.out"
    with out.open("w") as sink:
        study = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 300
        while out.read_text().count("has been submitted with SLURM jobid") < len(targets):
            assert study.poll() is None and time.monotonic() < deadline, out.read_text()[-4000:]
            time.sleep(0.5)
        calls = re.findall(r"^sbatch call: (.*)$", out.read_text(), flags=re.MULTILINE)
        rules = {target: "train" if target.startswith("runs/") else "evaluate_base" for target in targets}
        # the plugin comments each job with its rule (submit_string.py get_submit_command: --comment rule_<name>_...)
        submitted = {target: next(c for c in calls if f"--comment rule_{rule}_" in c) for target, rule in rules.items()}
        return {target: (call, _shown(env, call)) for target, call in submitted.items()}
    finally:
        jobs = re.findall(r"submitted with SLURM jobid (\d+)", out.read_text())
        subprocess.run(["scancel", *jobs], env=env, check=False)
        try:
            study.wait(timeout=120)  # Snakemake sees the jobs cancelled and ends (--retries 0)
        except subprocess.TimeoutExpired:
            study.kill()
            study.wait()


def _shown(env: dict[str, str], call: str) -> dict[str, str]:
    """Returns ``scontrol show job``'s fields of the job whose ``sbatch`` call is ``call`` (its comment names it)."""
    comment = re.search(r"--comment '?([^' ]+)", call)[1]
    for line in subprocess.run(
        ["scontrol", "-o", "show", "job"], env=env, capture_output=True, text=True
    ).stdout.splitlines():
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        if fields.get("Comment") == comment:
            return fields
    raise AssertionError(f"no job commented {comment}")


@pytest.mark.slurm_long  # about 4 minutes: each preset's Snakefile parsed three times (here and in two jobs)
@pytest.mark.parametrize("experiment", ["scopd_qwen2_5_vl_7b", "ltopd_qwen3_5_4b"])
def test_a_real_presets_jobs_are_submitted_with_their_shape(
    cluster: local_slurm.LocalSlurm, tmp_path: Path, experiment: str
) -> None:
    """One train and one evaluate job of each real preset as the pinned plugin submits them: one node, the grid's
    GPUs, CPUs and memory, the plan's time limit, and (training) SIGTERM the plan's lead before it. The calls
    are printed for workflow/README.md ("Submitted jobs")."""
    from sparsectx.plan.limits import planned_runtimes, planned_stop_leads

    grid = wf.load_grid(experiment)
    leads, limits = planned_stop_leads(grid), planned_runtimes(grid)
    train = max(grid.targets("train"), key=lambda target: leads[target])
    evaluate = grid.targets("full_context")[0]
    env = {**cluster.environ(), "SPARSECTX_SLURM_PARTITION": local_slurm.QUEUE_ONLY}
    submitted = _submit_held(tmp_path, env, experiment, [train, evaluate])
    for target, stage in ((train, "train"), (evaluate, "evaluate")):
        (call, job), res = submitted[target], grid.resources[stage]
        print(f"{experiment} {stage} {target}:\n{call.split(' --wrap=')[0]}")
        print("scontrol show job:", {k: job[k] for k in ("Partition", "NumNodes", "NumCPUs", "TimeLimit", "TRES")})
        # a pending job shows its node range, min-max ("1-1"), a cancelled one the count ("1")
        assert "--nodes=1" in call and job["NumNodes"] in ("1", "1-1") and job["Partition"] == local_slurm.QUEUE_ONLY
        assert f"--gpus={res['gpu']}" in call and job["TresPerJob"] == f"gres:gpu:{res['gpu']}"
        tres = dict(item.split("=", 1) for item in job["TRES"].split(","))  # e.g. cpu=32,mem=250G,node=1,...
        assert job["NumCPUs"] == str(res["cpus_per_task"]) and f"--mem {res['mem_mb']}" in call
        assert int(float(tres["mem"][:-1]) * {"M": 1, "G": 1024, "T": 1024**2}[tres["mem"][-1]]) == res["mem_mb"]
        hours, minutes = divmod(limits[target], 60)
        assert job["TimeLimit"] in (f"{hours:02d}:{minutes:02d}:00", f"{hours // 24}-{hours % 24:02d}:{minutes:02d}:00")
        assert ("--signal=TERM@" in call) == (stage == "train")
    assert f"--signal=TERM@{leads[train]}" in submitted[train][0]
