"""The Slurm executor against a real one-node Slurm cluster (tests/slurm_cluster.py).

Each job here is the real thing: a wrapper written by write_batch_script
(batch_script.py, beside this file), submitted with sbatch_argv's argv,
tracked with query, stopped with cancel.
Pure parsing and mapping tests are in test_slurm_parse.py. The timeout test
needs about 90 s (Slurm limits are whole minutes, checked every 30 s) and runs
only with HOPPER_SLURM_SLOW=1.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from hopper.core.slurm_parse import SlurmOutcome, SlurmState, slurm_outcome
from hopper.core.states import Reason
from hopper.executors.slurm import (
    NO_WORKDIR_EXIT,
    SlurmError,
    SlurmUnavailable,
    cancel,
    query,
    release,
    sbatch_argv,
    submit,
)
from hopper.executors.slurm_view import StateView

from .batch_script import write_batch_script

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from conftest import wait_for
from slurm_cluster import (
    SlurmCluster,
    free_port,
    marked_processes,
    missing_prerequisites,
    slurm_cluster,
)


@dataclass
class Job:
    slurm_id: str
    run_dir: Path
    env: dict[str, str]

    @property
    def log(self) -> Path:
        return self.run_dir / "job.log"

    def state(self) -> SlurmState:
        return query([self.slurm_id], self.env)[self.slurm_id]

    def slurm_state(self) -> str:
        s = self.state()
        return s.job.state if s.job else "NOT_FOUND"

    def finish(self, timeout: float = 30, stop: Reason | None = None) -> SlurmOutcome:
        wait_for(lambda: self.state().terminal, timeout, f"Slurm job {self.slurm_id} to end")
        outcome = slurm_outcome(self.state(), stop)
        assert outcome is not None
        return outcome


def run_job(
    slurm: SlurmCluster,
    tmp_path: Path,
    script: str,
    *,
    timeout_seconds: float | None = 300,
    resources: dict[str, object] | None = None,
    workdir: Path | None = None,
    before: str | None = None,
    hold: bool = False,
) -> Job:
    """Lay out a run directory as hopper does and submit its script to Slurm."""
    job_id = f"20261122-133540-042-t-{os.urandom(2).hex()}"
    run_dir = tmp_path / "runs" / job_id
    run_dir.mkdir(parents=True)
    (run_dir / "script.sh").write_text(script)
    if before is not None:
        (run_dir / "job.log").write_text(before)
    work = workdir or tmp_path / "work"
    work.mkdir(exist_ok=True)
    wrapper = write_batch_script(run_dir, run_dir / "script.sh", work)
    argv = sbatch_argv(
        job_id, wrapper, work, run_dir / "job.log", timeout_seconds, resources or {}, hold=hold
    )
    return Job(submit(argv, slurm.env), run_dir, slurm.env)


def test_completed_with_live_output(slurm: SlurmCluster, tmp_path: Path) -> None:
    go = tmp_path / "go"
    job = run_job(
        slurm,
        tmp_path,
        f"echo started; echo to-stderr >&2\n"
        f"for i in $(seq 200); do [ -e {go} ] && break; sleep 0.1; done\n"
        f"echo finished in $PWD\n",
    )
    # the output shows up while the job is still running, held by the go file
    wait_for(lambda: "started" in job.log.read_text() if job.log.exists() else False, 20)
    assert job.slurm_state() == "RUNNING"
    assert "to-stderr" in job.log.read_text()
    go.touch()
    outcome = job.finish()
    assert (outcome.reason, outcome.exit_code, outcome.signal) == (Reason.COMPLETED, 0, None)
    assert job.log.read_text().splitlines() == [
        "started",
        "to-stderr",
        f"finished in {tmp_path / 'work'}",
    ]
    s = job.state()
    assert s.job is not None and s.job.name == job.run_dir.name


def test_exit_3_is_failed_with_its_code(slurm: SlurmCluster, tmp_path: Path) -> None:
    job = run_job(slurm, tmp_path, "echo about to fail\nexit 3\n")
    outcome = job.finish()
    s = job.state()
    assert s.job is not None
    assert (s.job.state, s.job.exit_code, s.job.reason) == ("FAILED", 3, "NonZeroExitCode")
    assert (outcome.reason, outcome.exit_code, outcome.signal) == (Reason.EXIT_NONZERO, 3, None)
    assert job.log.read_text() == "about to fail\n"


def test_log_is_appended_not_truncated(slurm: SlurmCluster, tmp_path: Path) -> None:
    """job.log may already hold lines (an earlier attempt): Slurm appends to it."""
    job = run_job(slurm, tmp_path, "echo second\n", before="first\n")
    job.finish()
    assert job.log.read_text() == "first\nsecond\n"


def test_scancel_is_cancelled(slurm: SlurmCluster, tmp_path: Path) -> None:
    job = run_job(slurm, tmp_path, "echo up\nsleep 300\n")
    wait_for(lambda: job.slurm_state() == "RUNNING", 20, "the job to run")
    wait_for(lambda: job.log.exists() and "up" in job.log.read_text(), 20, "its output")
    assert cancel(job.slurm_id, env=slurm.env) is True
    outcome = job.finish(stop=Reason.ABORTED)
    s = job.state()
    assert s.job is not None and (s.job.state, s.job.signal) == ("CANCELLED", signal.SIGTERM)
    assert (outcome.reason, outcome.signal) == (Reason.ABORTED, signal.SIGTERM)
    # the same record, when hopper did not ask for it
    other = slurm_outcome(s, None)
    assert other is not None and other.reason is Reason.SIGNALED
    # the sleep is gone too (the autouse leak check also looks for its cwd)
    wait_for(lambda: not slurm.job_processes(), 15, "the job's processes to end")


def test_cancel_with_a_signal_reaches_the_script(slurm: SlurmCluster, tmp_path: Path) -> None:
    job = run_job(
        slurm,
        tmp_path,
        "trap 'echo got USR1; exit 0' USR1\necho ready\n"
        "for i in $(seq 300); do sleep 0.1; done\nexit 9\n",
    )
    wait_for(lambda: job.log.exists() and "ready" in job.log.read_text(), 20, "the trap")
    assert cancel(job.slurm_id, signal.SIGUSR1, slurm.env) is True
    outcome = job.finish()
    assert outcome.reason is Reason.COMPLETED
    assert "got USR1" in job.log.read_text()


def test_cancel_of_a_finished_job_is_harmless(slurm: SlurmCluster, tmp_path: Path) -> None:
    job = run_job(slurm, tmp_path, "true\n")
    job.finish()
    cancel(job.slurm_id, env=slurm.env)  # 22.05 says nothing and exits 0
    assert job.finish().reason is Reason.COMPLETED


def test_held_job_waits_for_release_and_is_found_by_name(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """Submit held, record, release: the crash window between sbatch and job.json."""
    job = run_job(slurm, tmp_path, "echo released\n", hold=True)
    state = job.state()
    assert state.job is not None and (state.job.state, state.job.reason) == (
        "PENDING",
        "JobHeldUser",
    )
    assert slurm_outcome(state) is None
    # a watcher that died before recording the id finds it by the hopper id
    view = StateView(slurm.env)  # what recovery asks
    named = view.named(job.run_dir.name)
    assert named is not None and [j.slurm_id for j in named] == [job.slurm_id]
    assert view.named("no-such-hopper-id") == []
    assert not job.log.exists()
    release(job.slurm_id, slurm.env)
    assert job.finish().reason is Reason.COMPLETED
    assert job.log.read_text() == "released\n"


def test_query_falls_back_to_scontrol(slurm: SlurmCluster, tmp_path: Path) -> None:
    """An squeue without --json: the same answer comes from scontrol show job -o."""
    job = run_job(slurm, tmp_path, "exit 5\n")
    job.finish()
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    fake = fake_bin / "squeue"
    fake.write_text("#!/bin/sh\necho \"squeue: unrecognized option '--json'\" >&2\nexit 1\n")
    fake.chmod(0o755)
    env = {**slurm.env, "PATH": f"{fake_bin}:{slurm.env['PATH']}"}
    states = query([job.slurm_id, "999997"], env)
    found = states[job.slurm_id].job
    assert found is not None and found.exit_code == 5
    assert not states["999997"].found


def test_unknown_id_is_lost(slurm: SlurmCluster) -> None:
    states = query(["999999"], slurm.env)
    assert states["999999"].found is False
    outcome = slurm_outcome(states["999999"])
    assert outcome is not None and outcome.reason is Reason.LOST


def test_query_many_in_one_call(slurm: SlurmCluster, tmp_path: Path) -> None:
    jobs = [run_job(slurm, tmp_path, f"exit {code}\n") for code in (0, 1, 2)]
    for job in jobs:
        job.finish()
    states = query([j.slurm_id for j in jobs] + ["999998"], slurm.env)
    codes = [states[j.slurm_id].job.exit_code for j in jobs]  # type: ignore[union-attr]
    assert codes == [0, 1, 2]
    assert not states["999998"].found


def test_resources_reach_slurm(slurm: SlurmCluster, tmp_path: Path) -> None:
    job = run_job(
        slurm,
        tmp_path,
        'echo "cpus=$SLURM_CPUS_PER_TASK mem=$SLURM_MEM_PER_NODE"\n',
        resources={"cpus": 1, "mem": "64M"},
        timeout_seconds=90,
    )
    job.finish()
    assert job.log.read_text() == "cpus=1 mem=64\n"
    limit = slurm.run("scontrol", "show", "job", "-o", job.slurm_id).stdout
    assert "TimeLimit=00:02:00" in limit


def test_impossible_resources_fail_at_submit(slurm: SlurmCluster, tmp_path: Path) -> None:
    with pytest.raises(SlurmError, match="sbatch failed"):
        run_job(slurm, tmp_path, "true\n", resources={"mem": "100T"})


def test_missing_workdir_does_not_run_in_tmp(slurm: SlurmCluster, tmp_path: Path) -> None:
    """Slurm runs a job whose --chdir fails in /tmp; the wrapper refuses instead."""
    run_dir = tmp_path / "runs" / "j-missing"
    run_dir.mkdir(parents=True)
    (run_dir / "script.sh").write_text("echo ran in $PWD\n")
    missing = tmp_path / "never-made"
    wrapper = write_batch_script(run_dir, run_dir / "script.sh", missing)
    argv = sbatch_argv(run_dir.name, wrapper, missing, run_dir / "job.log", 60, {})
    job = Job(submit(argv, slurm.env), run_dir, slurm.env)
    outcome = job.finish()
    assert (outcome.reason, outcome.exit_code) == (Reason.EXIT_NONZERO, NO_WORKDIR_EXIT)
    assert str(missing) in job.log.read_text()
    assert "ran in" not in job.log.read_text()


def test_controller_down_is_unavailable_not_lost(slurm: SlurmCluster, tmp_path: Path) -> None:
    """No answer from the controller must never read as "Slurm lost the job"."""
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        slurm.conf.read_text().replace(
            f"SlurmctldPort={slurm.ctld_port}", f"SlurmctldPort={free_port()}"
        )
        + "MessageTimeout=2\n"  # the clients retry for about this long
    )
    env = {**slurm.env, "SLURM_CONF": str(conf)}
    started = time.monotonic()
    with pytest.raises(SlurmUnavailable):
        query(["1"], env, timeout=30)
    with pytest.raises(SlurmUnavailable):
        submit(["sbatch", "--parsable", "--wrap", "true"], env, timeout=30)
    assert time.monotonic() - started < 60


@pytest.mark.skipif(
    os.environ.get("HOPPER_SLURM_SLOW") != "1",
    reason="Slurm time limits are whole minutes checked every 30 s: ~90 s; HOPPER_SLURM_SLOW=1",
)
@pytest.mark.timeout(240)
def test_timeout(slurm: SlurmCluster, tmp_path: Path) -> None:
    job = run_job(slurm, tmp_path, "echo long\nsleep 600\n", timeout_seconds=5)
    outcome = job.finish(timeout=200)
    assert outcome.reason is Reason.TIMEOUT
    # SIGTERM reached the job: reported as the signal, or as bash's 128+15
    assert outcome.signal == signal.SIGTERM or outcome.exit_code == 128 + signal.SIGTERM


def test_cluster_with_munge_leaves_nothing_behind(tmp_path: Path) -> None:
    """A second, munge-authenticated cluster: up, one job, down, no trace."""
    reason = missing_prerequisites("munge")
    if reason and os.environ.get("HOPPER_REQUIRE_SLURM") != "1":
        pytest.skip(reason)
    started = time.monotonic()
    with slurm_cluster(auth="munge") as c:
        assert c.auth == "munge"
        job = run_job(c, tmp_path, "echo via munge\n")
        assert job.finish().reason is Reason.COMPLETED
        root = str(c.root)
        pids = [p.pid for p in c.procs.values()]
    assert not Path(root).exists()
    assert not marked_processes(root)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert time.monotonic() - started < 30
