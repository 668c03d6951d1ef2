"""Record real Slurm client output into tests/data/slurm/ (run by hand, as root).

    .venv/bin/python tests/slurm/record_outputs.py [--slow]

Starts a private cluster (tests/slurm_cluster.py), runs one job per scenario
(the job name says which), and saves what ``squeue --json``, ``scontrol show
job -o``, ``sbatch --parsable`` and the failing client calls print. ``--slow``
adds a job that runs into its one-minute time limit (about 90 s more).
The parser tests read these files; re-record after a Slurm upgrade.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from slurm_cluster import SlurmCluster, free_port, slurm_cluster  # noqa: E402
from waiting import WaitTimeout, poll_until  # noqa: E402

DATA = HERE.parent / "data" / "slurm"
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def state_of(cluster: SlurmCluster, job: str) -> str:
    out = cluster.run("scontrol", "show", "job", "-o", job, check=False).stdout
    for token in out.split():
        if token.startswith("JobState="):
            return token.split("=", 1)[1]
    return ""


def wait_state(cluster: SlurmCluster, job: str, states: tuple[str, ...], timeout: float) -> str:
    try:
        return poll_until(
            lambda: (s := state_of(cluster, job)) in states and s,
            timeout,
            f"job {job} to reach {states}",
            interval=0.2,
        )
    except WaitTimeout as exc:
        raise SystemExit(f"{exc} (now {state_of(cluster, job)})") from None


def submit(cluster: SlurmCluster, name: str, work: Path, *extra: str, wrap: str) -> str:
    out = cluster.run(
        "sbatch",
        "--parsable",
        f"--job-name={name}",
        f"--chdir={work}",
        f"--output={work / (name + '.log')}",
        *extra,
        "--wrap",
        wrap,
    )
    return out.stdout.strip()


def snapshot(cluster: SlurmCluster, prefix: str) -> None:
    squeue = cluster.run("squeue", "--json").stdout
    (DATA / f"{prefix}_squeue.json").write_text(squeue)
    (DATA / f"{prefix}_scontrol.txt").write_text(
        cluster.run("scontrol", "show", "job", "-o").stdout
    )


def main() -> None:
    slow = "--slow" in sys.argv
    DATA.mkdir(parents=True, exist_ok=True)
    with slurm_cluster() as cluster:
        work = cluster.root / "work"
        work.mkdir()
        calls: list[dict[str, object]] = []
        jobs: dict[str, str] = {}
        jobs["pending_begin"] = submit(
            cluster, "pending_begin", work, "--begin=now+1hour", wrap="true"
        )
        jobs["completed"] = submit(cluster, "completed", work, wrap="echo out; echo err >&2")
        jobs["exit3"] = submit(cluster, "exit3", work, wrap="exit 3")
        jobs["selfkill9"] = submit(cluster, "selfkill9", work, wrap="kill -9 $$")
        for name in ("completed", "exit3", "selfkill9"):
            wait_state(cluster, jobs[name], TERMINAL, 30)
        bad = cluster.run(
            "sbatch",
            "--parsable",
            "--job-name=bad_chdir",
            "--chdir=/nonexistent/dir",
            f"--output={work / 'bad_chdir.log'}",
            "--wrap",
            "true",
            check=False,
        )
        calls.append(
            {
                "argv": "sbatch --chdir=/nonexistent/dir",
                "rc": bad.returncode,
                "stdout": bad.stdout,
                "stderr": bad.stderr,
            }
        )
        if bad.returncode == 0:
            jobs["bad_chdir"] = bad.stdout.strip()
            wait_state(cluster, jobs["bad_chdir"], TERMINAL, 30)
        jobs["cancelled"] = submit(cluster, "cancelled", work, wrap="sleep 300")
        jobs["node_fail"] = submit(cluster, "node_fail", work, "--no-requeue", wrap="sleep 300")
        wait_state(cluster, jobs["cancelled"], ("RUNNING",), 30)
        wait_state(cluster, jobs["node_fail"], ("RUNNING",), 30)
        snapshot(cluster, "running")
        cluster.run("scancel", jobs["cancelled"])
        wait_state(cluster, jobs["cancelled"], ("CANCELLED",), 30)
        cluster.run("scontrol", "update", "NodeName=localhost", "State=DOWN", "Reason=recording")
        wait_state(cluster, jobs["node_fail"], TERMINAL, 30)
        resume = cluster.run(
            "scontrol", "update", "NodeName=localhost", "State=RESUME", check=False
        )
        print("resume:", resume.returncode, resume.stderr.strip(), cluster.node_state())
        poll_until(lambda: cluster.node_state() == "idle", 30, "the node to resume", interval=0.2)
        if slow:
            jobs["timeout"] = submit(cluster, "timeout", work, "--time=1", wrap="sleep 300")
            wait_state(cluster, jobs["timeout"], ("TIMEOUT",), 240)
        snapshot(cluster, "final")
        for argv in (
            ["scontrol", "show", "job", "-o", "999999"],
            ["squeue", "-h", "-j", "999999"],
            ["scancel", jobs["completed"]],
            ["scancel", "999999"],
        ):
            r = cluster.run(*argv, check=False)
            calls.append(
                {"argv": " ".join(argv), "rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr}
            )
        # the controller unreachable: a copy of the config aimed at an unused port
        bad_conf = cluster.root / "unreachable.conf"
        bad_conf.write_text(
            cluster.conf.read_text().replace(
                f"SlurmctldPort={cluster.ctld_port}", f"SlurmctldPort={free_port()}"
            )
        )
        env = {**cluster.env, "SLURM_CONF": str(bad_conf)}
        for argv, keep in (
            (["squeue", "--json"], "unreachable_squeue.json"),
            (["scontrol", "show", "job", "-o"], None),
            (["sbatch", "--parsable", "--wrap", "true"], None),
        ):
            r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
            calls.append(
                {
                    "argv": " ".join(argv) + "  # controller unreachable",
                    "rc": r.returncode,
                    "stdout": "" if keep else r.stdout,
                    "stderr": r.stderr,
                }
            )
            if keep:
                (DATA / keep).write_text(r.stdout)
        config = cluster.run("scontrol", "show", "config").stdout
        (DATA / "show_config.txt").write_text(config)
        (DATA / "jobcomp.txt").write_text((cluster.root / "jobcomp.txt").read_text())
        (DATA / "calls.json").write_text(json.dumps(calls, indent=1) + "\n")
        (DATA / "jobs.json").write_text(json.dumps(jobs, indent=1) + "\n")
        print(json.dumps(jobs))


if __name__ == "__main__":
    main()
