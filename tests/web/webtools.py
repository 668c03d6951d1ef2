"""Helpers for the dashboard's tests: run directories written by hand, the app served by a
real uvicorn on 127.0.0.1, and an SSE reader that tests wait on (no polling)."""

from __future__ import annotations

import json
import queue
import socket
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from hopper.core.record import JobRecord, Usage
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import write_record
from hopper.store.layout import Layout
from hopper.web.app import create_app
from waiting import poll_until

TOKEN = "t" * 43
T0 = datetime(2026, 11, 22, 1, 0, tzinfo=UTC)


def make_job(
    layout: Layout,
    job_id: str,
    state: JobState = JobState.SUCCEEDED,
    *,
    name: str | None = None,
    agent: str = "bash",
    group: str = "",
    created: datetime = T0,
    **fields: Any,
) -> Path:
    run_dir = layout.run_dir(job_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    terminal = state in (JobState.SUCCEEDED, JobState.FAILED, JobState.ABORTED)
    defaults: dict[str, Any] = {
        "started_at": created + timedelta(seconds=1) if state is not JobState.QUEUED else None,
        "finished_at": created + timedelta(seconds=61) if terminal else None,
        "duration_seconds": 60.0 if terminal else None,
        "reason": {
            JobState.SUCCEEDED: Reason.COMPLETED,
            JobState.FAILED: Reason.EXIT_NONZERO,
            JobState.ABORTED: Reason.ABORTED,
        }.get(state),
    }
    record = JobRecord(
        id=job_id,
        name=name or job_id,
        state=state,
        agent=agent,
        host="testhost",
        inbox_path=f"inbox/{group}/{job_id}.prompt.md" if group else f"inbox/{job_id}.prompt.md",
        created_at=created,
        **{**defaults, "group": group or None, **fields},  # the scheduling group, as admitted
    )
    write_record(run_dir, record, durable=False)
    return run_dir


def usage(cost: float, tokens: int) -> Usage:
    return Usage(input_tokens=tokens, output_tokens=tokens // 2, cost_usd=cost)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LiveServer:
    def __init__(self, layout: Layout, fallback: float = 30.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = create_app(layout, TOKEN, fallback=fallback)
        self.server = uvicorn.Server(
            uvicorn.Config(
                app,
                host="127.0.0.1",
                port=self.port,
                log_level="warning",
                lifespan="on",
                timeout_graceful_shutdown=1,
            )
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        poll_until(lambda: self.server.started, 20, "uvicorn to start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


class Stream:
    """An SSE stream read on a thread; :meth:`wait_for` blocks on its queue, no polling."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self.frames: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._client = httpx.Client(timeout=httpx.Timeout(30.0))
        self._cm = self._client.stream(
            "GET",
            url,
            headers={"accept": "text/event-stream", "authorization": f"Bearer {TOKEN}"}
            | (headers or {}),
        )
        self.response = self._cm.__enter__()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        event, data = "message", ""
        try:
            for line in self.response.iter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    data = f"{data}\n{line[6:]}" if data else line[6:]
                elif line == "" and data:
                    self.frames.put((event, data))
                    event, data = "message", ""
        except Exception:  # the stream closed under us at teardown
            pass
        self.frames.put(None)

    def wait_for(self, event: str, timeout: float = 10.0) -> tuple[str, list[tuple[str, str]]]:
        """The data of the next ``event`` frame, and every frame before it."""
        seen: list[tuple[str, str]] = []
        while True:
            try:
                frame = self.frames.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no {event!r} frame within {timeout}s; saw {seen}") from None
            if frame is None:
                raise AssertionError(f"stream ended before {event!r}; saw {seen}")
            if frame[0] == event:
                return frame[1], seen
            seen.append(frame)

    def ended(self, timeout: float = 10.0) -> list[tuple[str, str]]:
        """Every frame until the server closes the stream."""
        rest: list[tuple[str, str]] = []
        while True:
            try:
                frame = self.frames.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"stream still open after {timeout}s: {rest}") from None
            if frame is None:
                return rest
            rest.append(frame)

    def close(self) -> None:
        self._cm.__exit__(None, None, None)
        self._client.close()
        self._thread.join(timeout=10)


def many_jobs(layout: Layout, count: int) -> dict[str, int]:
    """``count`` finished jobs, written fast (one model dump, then plain JSON per job): names
    ``job-000000`` (oldest) on, one in seven failed, one in fifty aborted, the rest
    succeeded; each finalized (its prompt filed in processed/), as a busy root's history
    is. Their count by state."""
    template = JobRecord(
        id="x",
        name="x",
        state=JobState.SUCCEEDED,
        agent="bash",
        host="testhost",
        inbox_path="inbox/x.prompt.md",
        created_at=T0,
    ).model_dump(mode="json")
    made = dict.fromkeys((s.value for s in JobState), 0)
    layout.processed.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        created = T0 + timedelta(seconds=i)
        name = f"job-{i:06d}"
        job_id = f"{created:%Y%m%d-%H%M%S}-000-{name}-0001"
        state, reason, code = (
            ("failed", "exit_nonzero", 1)
            if i % 7 == 3
            else ("aborted", "aborted", None)
            if i % 50 == 5
            else ("succeeded", "completed", 0)
        )
        made[state] += 1
        processed = f"processed/{name}.{job_id}.prompt.md"
        record = {
            **template,
            "id": job_id,
            "name": name,
            "state": state,
            "reason": reason,
            "exit_code": code,
            "detail": f"exited {code}" if code else None,
            "inbox_path": f"inbox/{name}.prompt.md",
            "processed_path": processed,
            "created_at": created.isoformat(),
            "started_at": created.isoformat(),
            "finished_at": (created + timedelta(seconds=2)).isoformat(),
            "duration_seconds": 2.0,
        }
        run_dir = layout.runs / job_id
        run_dir.mkdir(parents=True)
        (run_dir / "job.json").write_text(json.dumps(record, indent=2) + "\n")
        (layout.root / processed).write_text(f"prompt of {name}\n")
        if state == "failed":
            (run_dir / "job.log").write_text(f"step one\nerror: {name} broke\n")
    return made
