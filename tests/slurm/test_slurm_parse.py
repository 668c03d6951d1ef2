"""Pure readers and the state mapping, on output recorded from a real Slurm 22.05.8.

tests/data/slurm/ holds what tests/slurm/record_outputs.py saved (jobs.json
names the scenario behind each job id). No processes here.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from hopper.core.slurm_parse import (
    SlurmJob,
    SlurmParseError,
    SlurmReportedError,
    SlurmState,
    base_state,
    parse_sbatch,
    parse_scontrol,
    parse_scontrol_line,
    parse_squeue_json,
    slurm_outcome,
    split_exit_pair,
    split_wait_status,
    states_for,
)
from hopper.core.slurm_resources import ResourceError, resource_args
from hopper.core.states import Reason
from hopper.executors.slurm import (
    NO_WORKDIR_EXIT,
    filename_pattern,
    sbatch_argv,
    time_limit_minutes,
)

from .batch_script import batch_script

DATA = Path(__file__).resolve().parent.parent / "data" / "slurm"
JOBS: dict[str, str] = json.loads((DATA / "jobs.json").read_text())

# scenario -> (Slurm state, exit code, signal, reason) as recorded
RECORDED = {
    "pending_begin": ("PENDING", 0, None, "BeginTime"),
    "completed": ("COMPLETED", 0, None, "None"),
    "exit3": ("FAILED", 3, None, "NonZeroExitCode"),
    "selfkill9": ("FAILED", None, 9, "JobLaunchFailure"),
    "bad_chdir": ("COMPLETED", 0, None, "None"),  # Slurm ran it in /tmp instead
    "cancelled": ("CANCELLED", None, 15, "None"),
    "node_fail": ("NODE_FAIL", None, 15, "NodeDown"),
    # the shell caught the SIGTERM and exited 128+15 (another run recorded 0:15)
    "timeout": ("TIMEOUT", 143, None, "TimeLimit"),
}


def by_name(jobs: list[SlurmJob]) -> dict[str, SlurmJob]:
    return {job.name: job for job in jobs}


@pytest.mark.parametrize("source", ["final_squeue.json", "final_scontrol.txt"])
def test_recorded_final_states(source: str) -> None:
    text = (DATA / source).read_text()
    jobs = parse_squeue_json(text) if source.endswith(".json") else parse_scontrol(text)
    found = by_name(jobs)
    assert set(found) == set(RECORDED)
    for name, (state, code, sig, reason) in RECORDED.items():
        job = found[name]
        assert job.slurm_id == JOBS[name]
        assert (job.state, job.exit_code, job.signal, job.reason) == (state, code, sig, reason), (
            name
        )


def test_json_and_scontrol_agree_while_running() -> None:
    from_json = by_name(parse_squeue_json((DATA / "running_squeue.json").read_text()))
    from_scontrol = by_name(parse_scontrol((DATA / "running_scontrol.txt").read_text()))
    assert from_json == from_scontrol
    assert from_json["cancelled"].state == "RUNNING"
    assert from_json["node_fail"].state == "RUNNING"


def test_recorded_outcomes() -> None:
    jobs = parse_squeue_json((DATA / "final_squeue.json").read_text())
    states = states_for(JOBS.values(), jobs)
    outcome = {name: slurm_outcome(states[sid]) for name, sid in JOBS.items()}
    assert outcome["pending_begin"] is None
    got = {name: (o.reason, o.exit_code, o.signal) for name, o in outcome.items() if o}
    assert got == {
        "completed": (Reason.COMPLETED, 0, None),
        "bad_chdir": (Reason.COMPLETED, 0, None),
        "exit3": (Reason.EXIT_NONZERO, 3, None),
        "selfkill9": (Reason.SIGNALED, None, 9),
        "cancelled": (Reason.SIGNALED, None, 15),  # nobody in hopper asked for it
        "node_fail": (Reason.LOST, None, 15),
        "timeout": (Reason.TIMEOUT, 143, None),
    }


def test_cancel_hopper_asked_for_wins() -> None:
    jobs = parse_squeue_json((DATA / "final_squeue.json").read_text())
    state = states_for([JOBS["cancelled"]], jobs)[JOBS["cancelled"]]
    for asked in (Reason.ABORTED, Reason.SHUTDOWN, Reason.TIMEOUT):
        outcome = slurm_outcome(state, stop_requested=asked)
        assert outcome is not None
        assert (outcome.reason, outcome.signal) == (asked, 15)


def test_a_finished_job_keeps_its_outcome_whatever_was_asked() -> None:
    done = SlurmState("5", True, SlurmJob("5", "COMPLETED", exit_code=0))
    outcome = slurm_outcome(done, stop_requested=Reason.ABORTED)
    assert outcome is not None and outcome.reason is Reason.COMPLETED


def test_unknown_id_is_lost() -> None:
    jobs = parse_squeue_json((DATA / "final_squeue.json").read_text())
    states = states_for(["999999", JOBS["completed"]], jobs)
    assert states["999999"] == SlurmState("999999", found=False)
    assert states["999999"].terminal
    assert states[JOBS["completed"]].found
    outcome = slurm_outcome(states["999999"])
    assert outcome is not None and outcome.reason is Reason.LOST
    assert "999999" in outcome.detail and "MinJobAge" in outcome.detail


@pytest.mark.parametrize(
    ("state", "exit_code", "sig", "reason", "expect"),
    [
        # states this machine cannot produce (no cgroups, no preemption set up)
        ("OUT_OF_MEMORY", 0, None, "OutOfMemory", (Reason.SIGNALED, None, signal.SIGKILL)),
        ("PREEMPTED", None, 15, "None", (Reason.LOST, None, 15)),
        ("BOOT_FAIL", 0, None, "None", (Reason.SPAWN_FAILED, None, None)),
        ("DEADLINE", None, 15, "None", (Reason.TIMEOUT, None, 15)),
        ("SPECIAL_EXIT", 2, None, "None", (Reason.EXIT_NONZERO, 2, None)),
        ("REVOKED", 0, None, "None", (Reason.LOST, 0, None)),
        # launch failure: FAILED with neither exit code nor signal
        ("FAILED", 0, None, "JobLaunchFailure", (Reason.SPAWN_FAILED, 0, None)),
    ],
)
def test_synthetic_states(
    state: str, exit_code: int | None, sig: int | None, reason: str, expect: tuple[object, ...]
) -> None:
    job = SlurmJob("7", state, reason=reason, exit_code=exit_code, signal=sig)
    outcome = slurm_outcome(SlurmState("7", True, job))
    assert outcome is not None
    assert (outcome.reason, outcome.exit_code, outcome.signal) == expect
    assert outcome.detail


@pytest.mark.parametrize(
    "state", ["PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED"]
)
def test_active_states_have_no_outcome(state: str) -> None:
    s = SlurmState("1", True, SlurmJob("1", state))
    assert not s.terminal
    assert slurm_outcome(s) is None


def test_base_state_forms() -> None:
    assert base_state("CANCELLED by 0") == "CANCELLED"
    assert base_state("RUNNING+") == "RUNNING"
    assert base_state(["RUNNING", "COMPLETING"]) == "RUNNING"
    assert base_state(["REQUEUE_HOLD"]) == "REQUEUE_HOLD"
    assert base_state("failed") == "FAILED"


def test_exit_codes() -> None:
    assert split_wait_status(768) == (3, None)
    assert split_wait_status(15) == (None, 15)
    assert split_wait_status(0) == (0, None)
    assert split_exit_pair("3:0") == (3, None)
    assert split_exit_pair("0:9") == (None, 9)
    with pytest.raises(SlurmParseError):
        split_exit_pair("x")


def test_newer_json_shape() -> None:
    """Slurm 23.02+ prints exit_code as an object and numbers as {set, number}."""
    doc = {
        "jobs": [
            {
                "job_id": 11,
                "name": "a",
                "job_state": ["FAILED"],
                "state_reason": "NonZeroExitCode",
                "exit_code": {
                    "status": ["EXITED"],
                    "return_code": {"set": True, "infinite": False, "number": 3},
                },
            },
            {
                "job_id": 12,
                "name": "b",
                "job_state": ["CANCELLED"],
                "exit_code": {
                    "status": ["SIGNALED"],
                    "return_code": {"set": True, "infinite": False, "number": 0},
                    "signal": {"id": {"set": True, "infinite": False, "number": 15}},
                },
            },
            {"job_id": 13, "name": "c", "job_state": "PENDING", "exit_code": {"status": "PENDING"}},
        ],
        "errors": [],
    }
    jobs = {j.slurm_id: j for j in parse_squeue_json(json.dumps(doc))}
    assert (jobs["11"].state, jobs["11"].exit_code, jobs["11"].signal) == ("FAILED", 3, None)
    assert (jobs["12"].state, jobs["12"].exit_code, jobs["12"].signal) == ("CANCELLED", None, 15)
    assert (jobs["13"].state, jobs["13"].exit_code) == ("PENDING", None)


def test_unreachable_controller_is_an_error_not_an_empty_list() -> None:
    """22.05 exits 0 with an errors list when the controller does not answer."""
    text = (DATA / "unreachable_squeue.json").read_text()
    with pytest.raises(SlurmReportedError, match="slurm_load_jobs"):
        parse_squeue_json(text)


@pytest.mark.parametrize(
    "text", ["", "not json", '{"jobs": 3}', '{"jobs": [], "errors": [{"error": "x"}]}']
)
def test_bad_json(text: str) -> None:
    with pytest.raises(SlurmParseError):
        parse_squeue_json(text)


def test_scontrol_values_with_spaces_and_no_jobs() -> None:
    line = (
        "JobId=4 JobName=a b JobState=RUNNING Reason=None ExitCode=0:0 "
        "WorkDir=/tmp/with space StdOut=/x/job.log"
    )
    fields = parse_scontrol_line(line)
    assert fields["JobName"] == "a b"
    assert fields["WorkDir"] == "/tmp/with space"
    assert parse_scontrol("No jobs in the system\n") == []


def test_sbatch_parsable() -> None:
    assert parse_sbatch("5\n") == "5"
    assert parse_sbatch("17;cluster\n") == "17"
    for bad in ("", "Submitted batch job 5\n"):
        with pytest.raises(SlurmParseError):
            parse_sbatch(bad)


# --- argv -------------------------------------------------------------------------


def test_sbatch_argv(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "20261122-133540-042-fix-3f9a"
    argv = sbatch_argv(
        "20261122-133540-042-fix-3f9a",
        run / "slurm.sh",
        tmp_path / "work",
        run / "job.log",
        61,
        {"cpus": 2, "mem": "4g", "gres": "gpu:a100:1"},
    )
    assert argv == [
        "sbatch",
        "--parsable",
        "--job-name=20261122-133540-042-fix-3f9a",
        f"--chdir={tmp_path / 'work'}",
        f"--output={run / 'job.log'}",
        f"--error={run / 'job.log'}",
        "--open-mode=append",
        "--no-requeue",
        "--time=2",
        "--cpus-per-task=2",
        "--mem=4G",
        "--gres=gpu:a100:1",
        str(run / "slurm.sh"),
    ]


def test_sbatch_argv_without_timeout_or_resources(tmp_path: Path) -> None:
    argv = sbatch_argv("j1", tmp_path / "s.sh", tmp_path, tmp_path / "job.log", None, {})
    assert not any(a.startswith(("--time", "--cpus", "--mem", "--gres")) for a in argv)
    assert argv[-1] == str(tmp_path / "s.sh")


def test_sbatch_argv_refuses_odd_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="job id"):
        sbatch_argv("a b", tmp_path / "s", tmp_path, tmp_path / "l", None, {})
    with pytest.raises(ValueError, match="absolute"):
        sbatch_argv("j", Path("s.sh"), tmp_path, tmp_path / "l", None, {})
    with pytest.raises(ValueError, match="backslash"):
        filename_pattern(Path("/a\\b/job.log"))
    assert filename_pattern(Path("/data/100%/job.log")) == "/data/100%%/job.log"


def test_time_limit_rounds_up() -> None:
    assert time_limit_minutes(1) == 1
    assert time_limit_minutes(60) == 1
    assert time_limit_minutes(60.5) == 2
    assert time_limit_minutes(45 * 60) == 45
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            time_limit_minutes(bad)


@pytest.mark.parametrize(
    ("resources", "expect"),
    [
        ({"cpus": 1}, ["--cpus-per-task=1"]),
        ({"cpus": "4"}, ["--cpus-per-task=4"]),
        ({"mem": 512}, ["--mem=512"]),
        ({"mem": "2G"}, ["--mem=2G"]),
        ({"gres": "gpu:1"}, ["--gres=gpu:1"]),
        ({"gres": "gpu:a100:2,nic:1"}, ["--gres=gpu:a100:2,nic:1"]),
    ],
)
def test_resources(resources: dict[str, object], expect: list[str]) -> None:
    assert resource_args(resources) == expect


@pytest.mark.parametrize(
    "resources",
    [
        {"cpus": 0},
        {"cpus": True},
        {"cpus": "two"},
        {"cpus": 1.5},
        {"mem": "lots"},
        {"mem": "4G; rm -rf /"},
        {"mem": 0},
        {"gres": "gpu:1 --wrap=x"},
        {"gres": 3},
        {"partition": "gpu"},
    ],
)
def test_bad_resources(resources: dict[str, object]) -> None:
    with pytest.raises(ResourceError):
        resource_args(resources)


def test_batch_script_runs_the_script_from_odd_paths(tmp_path: Path) -> None:
    """The wrapper quotes its paths: spaces, quotes, $ and ; stay one argument."""
    odd = tmp_path / "it's a $dir; with `stuff`"
    odd.mkdir()
    script = odd / "script.sh"
    script.write_text('echo "pwd=$PWD"; echo "args=$#"; exit 4\n')
    wrapper = tmp_path / "slurm.sh"
    wrapper.write_text(batch_script(script, odd))
    done = subprocess.run(["bash", str(wrapper)], capture_output=True, text=True, timeout=10)
    assert done.returncode == 4
    assert done.stdout == f"pwd={odd}\nargs=0\n"
    missing = tmp_path / "gone"
    wrapper.write_text(batch_script(script, missing))
    done = subprocess.run(["bash", str(wrapper)], capture_output=True, text=True, timeout=10)
    assert done.returncode == NO_WORKDIR_EXIT
    assert str(missing) in done.stderr
