"""The JSON API under ``/api`` (version 1): what the page uses, and scripts may.

Reads come from the status index and the run directories, writes go through
:mod:`hopper.web.actions`. Every job id in a path is checked against the run
directory names before anything is read: no ``..``, no slashes (encoded or
not), no links; anything else is 404. Errors are ``{"error": reason}``.
docs/web.md lists every endpoint.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import time
from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from hopper.config import Config
from hopper.core.durations import BadDuration, parse_duration
from hopper.core.selection import JobFilter
from hopper.core.states import TERMINAL_STATES, JobState, Reason
from hopper.core.tally import GroupBy, tally
from hopper.errors import HopperError
from hopper.sessionhost.contract import CAST_FILE
from hopper.store.index_page import PAGE_MAX
from hopper.store.jobfile import EVENTS_FILE, JOB_FILE, LOG_FILE
from hopper.store.layout import NotARealFolder
from hopper.store.resubmit import CannotResubmit, JobStillActive, resubmit
from hopper.store.saferead import RECORD_LIMIT, UnreadableFile, read_bytes, read_json
from hopper.web import actions, sse
from hopper.web.actions import Refused
from hopper.web.catalog import Catalog, Waits
from hopper.web.files import open_regular, read_tail
from hopper.web.health import watcher_health
from hopper.web.hub import Hub

API_VERSION = 1
RESULT_MAX = 4 << 20
EVENTS_MAX = 4 << 20
BODY_MAX = 2 << 20
_ID_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
SEARCH_MAX = 200
PAGE_SIZE = 50


def error(reason: str, status: int) -> JSONResponse:
    return JSONResponse(
        {"error": reason}, status_code=status, headers={"cache-control": "no-store"}
    )


def job_dir(request: Request) -> Path:
    """The run directory the path's ``{id}`` names; Refused(404) for anything else."""
    raw: str = request.path_params["id"]
    runs: Path = request.app.state.layout.runs
    sent = bytes(request.scope.get("raw_path") or b"").lower()
    if b"%2f" in sent or b"%5c" in sent:  # an encoded slash: routed as a path, meant as an id
        raise Refused("no such job (an encoded slash is not part of a job id)", status=404)
    if not _ID_OK.match(raw) or ".." in raw:
        raise Refused(f"no job {raw!r}", status=404)
    try:
        st = os.lstat(runs / raw)
    except OSError:
        raise Refused(f"no job {raw!r} under {runs}", status=404) from None
    if not stat.S_ISDIR(st.st_mode):
        raise Refused(f"no job {raw!r} under {runs}", status=404)
    return runs / raw


def read_record(run_dir: Path) -> dict[str, Any]:
    try:
        record = read_json(run_dir / JOB_FILE, RECORD_LIMIT)
    except FileNotFoundError:
        raise Refused(f"{run_dir.name}: no job.json yet (a claim in progress)", 404) from None
    except UnreadableFile as exc:
        raise Refused(exc.render(), 500) from None
    if not isinstance(record, dict):
        raise Refused(f"{run_dir / JOB_FILE}: not a JSON object", 500)
    return record


def job_filter(request: Request) -> tuple[JobFilter, int | None]:
    q = request.query_params
    states: set[JobState] = set()
    for value in q.getlist("state"):
        for part in filter(None, value.split(",")):
            try:
                states.add(JobState(part))
            except ValueError:
                known = ", ".join(s.value for s in JobState)
                raise Refused(f"state: {part!r} is not a state ({known})") from None
    since = None
    if q.get("since"):
        try:
            since = time.time() - parse_duration(q["since"])
        except BadDuration as exc:
            raise Refused(f"since: {exc}") from None
    limit = None
    if q.get("limit"):
        if not q["limit"].isdigit():
            raise Refused("limit: a whole number of jobs")
        limit = int(q["limit"])

    def many(key: str) -> list[str]:
        return [p for v in q.getlist(key) for p in v.split(",") if p]

    reasons = frozenset(many("reason"))
    unknown = sorted(reasons - {r.value for r in Reason})
    if unknown:
        known = ", ".join(r.value for r in Reason)
        raise Refused(f"reason: {unknown[0]!r} is not a reason ({known})")
    text = q.get("q", "")
    if len(text) > SEARCH_MAX:
        raise Refused(f"q: a search of at most {SEARCH_MAX} characters")
    wanted = JobFilter(
        states=frozenset(states),
        since=since,
        agents=frozenset(many("agent")),
        groups=frozenset(many("group")),
        names=tuple(many("name")),
        reasons=reasons,
        text=text,
    )
    return wanted, limit


async def list_jobs(request: Request) -> Response:
    hub: Hub = request.app.state.hub
    if sse.wants_stream(request.headers.get("accept")):
        sub = hub.subscribe_jobs()
        hello = ("hello", json.dumps({"paused": hub.paused, "api": API_VERSION}))
        return sse.response(sub, [hello], lambda: hub.unsubscribe_jobs(sub))
    wanted, limit = job_filter(request)
    catalog: Catalog = request.app.state.catalog
    text = await catalog.call(catalog.listing(wanted, limit))
    return Response(text, media_type="application/json", headers={"cache-control": "no-store"})


async def page_(request: Request) -> Response:
    """One page of the list, newest first, with the counts by state over every page
    (``store/index_page.py``): ``before`` is the previous page's ``next``."""
    wanted, _ = job_filter(request)
    q = request.query_params
    size = q.get("size", str(PAGE_SIZE))
    if not size.isdigit() or not 1 <= int(size) <= PAGE_MAX:
        raise Refused(f"size: a whole number of jobs from 1 to {PAGE_MAX}")
    before = q.get("before") or None
    if before is not None and not _ID_OK.match(before):
        raise Refused("before: the `next` of the previous page (a job id)")
    catalog: Catalog = request.app.state.catalog
    config: Config = request.app.state.config
    now = time.time()
    health = await asyncio.to_thread(watcher_health, request.app.state.layout, config, now, 0, 0)
    waits = Waits(config.slot_limits(), config.dependency_timeout, health.state == "serving", now)
    text = await catalog.call(catalog.paged(wanted, before, int(size), waits))
    return Response(text, media_type="application/json", headers={"cache-control": "no-store"})


async def overview_(request: Request) -> Response:
    """Counts by state (every job), pause, and watcher health from the heartbeat files."""
    catalog: Catalog = request.app.state.catalog
    now = time.time()
    counts, freshest = await catalog.call(Catalog.tallies(now))
    health = await asyncio.to_thread(
        watcher_health,
        request.app.state.layout,
        request.app.state.config,
        now,
        counts[JobState.QUEUED.value],
        counts[JobState.RUNNING.value],
    )
    hub: Hub = request.app.state.hub
    return JSONResponse(
        {
            "api": API_VERSION,
            "root": str(request.app.state.layout.root),
            "counts": counts,
            "paused": hub.paused,
            "watcher": health.state,
            "watcher_detail": health.detail,
            "watchers": health.watchers,
            "banner": health.banner,
            "freshest_heartbeat_age": freshest,
            "reasons": [r.value for r in Reason],
            "live": "inotify" if hub.inotify_ok else f"rescan every {hub.fallback:g}s",
        },
        headers={"cache-control": "no-store"},
    )


async def get_job(request: Request) -> Response:
    record = read_record(job_dir(request))
    return JSONResponse(record, headers={"cache-control": "no-store"})


async def get_log(request: Request) -> Response:
    return await _followable(request, "log")


async def get_cast(request: Request) -> Response:
    """An interactive job's terminal.cast (asciicast v2): the file (Range as for the log;
    404 when the job has none), or followed live as ``cast`` records."""
    return await _followable(request, "cast")


async def get_events(request: Request) -> Response:
    return await _followable(request, "events")


async def _followable(request: Request, kind: str) -> Response:
    run_dir = job_dir(request)
    if sse.wants_stream(request.headers.get("accept")):
        try:
            state = read_record(run_dir).get("state")
        except Refused as exc:
            if exc.status != 404:
                raise
            state = None  # claimed, not yet recorded: follow it
        hub: Hub = request.app.state.hub
        sub, backlog = hub.follow(run_dir.name, kind, state if isinstance(state, str) else None)
        return sse.response(sub, backlog, lambda: hub.unfollow(run_dir.name, kind, sub))
    if kind == "log":
        return _stream_file(run_dir / LOG_FILE, request)
    if kind == "cast":
        if not os.path.lexists(run_dir / CAST_FILE):
            raise Refused(f"{run_dir.name} has no {CAST_FILE} (not an interactive job)", 404)
        return _stream_file(run_dir / CAST_FILE, request)
    return _events_json(run_dir, request.query_params.get("tail"))


def _stream_file(path: Path, request: Request) -> Response:
    """job.log as it is now, streamed 64 KiB at a time (never whole in memory), or the
    byte range a ``Range: bytes=A-B`` / ``bytes=A-`` / ``bytes=-N`` header asks for (206;
    416 outside the file); ``?download=1`` makes the browser save it as ``<id>.log``."""
    headers = {"accept-ranges": "bytes", "cache-control": "no-store"}
    if request.query_params.get("download"):
        suffix = ".cast" if path.name == CAST_FILE else ".log"
        headers["content-disposition"] = f'attachment; filename="{path.parent.name}{suffix}"'
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return Response(b"", media_type="text/plain; charset=utf-8", headers=headers)
    except (OSError, UnreadableFile) as exc:
        raise Refused(exc.render() if isinstance(exc, UnreadableFile) else str(exc), 500) from None
    size = os.fstat(fd).st_size
    start, end, status = 0, size, 200
    wanted = request.headers.get("range")
    if wanted is not None:
        span = byte_range(wanted, size)
        if span is None:
            os.close(fd)
            return Response(
                f"{wanted!r}: not a byte range of this {size}-byte file\n",
                status_code=416,
                media_type="text/plain; charset=utf-8",
                headers={**headers, "content-range": f"bytes */{size}"},
            )
        start, end, status = span[0], span[1], 206
        headers["content-range"] = f"bytes {start}-{end - 1}/{size}"
    headers["content-length"] = str(end - start)

    async def chunks() -> AsyncIterator[bytes]:
        offset = start
        try:
            while offset < end:
                chunk = os.pread(fd, min(1 << 16, end - offset), offset)
                if not chunk:
                    return
                offset += len(chunk)
                yield chunk
        finally:
            os.close(fd)

    return StreamingResponse(
        chunks(), status_code=status, media_type="text/plain; charset=utf-8", headers=headers
    )


_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def byte_range(header: str, size: int) -> tuple[int, int] | None:
    """``[start, end)`` of a single-range ``Range`` header within ``size`` bytes; None if
    it is not one this file can satisfy (several ranges are not served)."""
    m = _RANGE.match(header.strip())
    if m is None or m.group(1) == m.group(2) == "":
        return None
    if m.group(1) == "":  # the last N bytes
        n = int(m.group(2))
        return (max(0, size - n), size) if n and size else None
    first = int(m.group(1))
    last = int(m.group(2)) + 1 if m.group(2) else size
    if first >= size or last <= first:
        return None
    return first, min(last, size)


def _events_json(run_dir: Path, tail: str | None) -> Response:
    if tail is not None and not tail.isdigit():
        raise Refused("tail: a whole number of events")
    try:
        data, size = read_tail(run_dir / EVENTS_FILE, EVENTS_MAX)
    except FileNotFoundError:
        data, size = b"", 0
    except (OSError, UnreadableFile) as exc:
        raise Refused(exc.render() if isinstance(exc, UnreadableFile) else str(exc), 500) from None
    lines = data.split(b"\n")
    if size > len(data):
        lines = lines[1:]  # the first piece is part of an earlier line
    events = []
    for line in lines:
        try:
            event = json.loads(line) if line.strip() else None
        except (ValueError, RecursionError):
            continue
        if isinstance(event, dict):
            events.append(event)
    if tail is not None:
        events = events[-int(tail) :] if int(tail) else []
    return JSONResponse(events, headers={"cache-control": "no-store"})


async def get_result(request: Request) -> Response:
    run_dir = job_dir(request)
    record = read_record(run_dir)
    name = record.get("result_path") or "result.md"
    if not isinstance(name, str) or "/" in name or name.startswith("."):
        raise Refused(f"{run_dir / JOB_FILE}: result_path {name!r} is not a file of the run", 500)
    try:
        data = read_bytes(run_dir / name, RESULT_MAX, truncate=True)
    except FileNotFoundError:
        raise Refused(f"{run_dir.name} has no {name}", 404) from None
    except (OSError, UnreadableFile) as exc:
        raise Refused(exc.render() if isinstance(exc, UnreadableFile) else str(exc), 500) from None
    return Response(data, media_type="text/markdown; charset=utf-8")


async def abort(request: Request) -> Response:
    run_dir = job_dir(request)
    state = read_record(run_dir).get("state")
    if state in {s.value for s in TERMINAL_STATES}:
        raise Refused(f"{run_dir.name} already finished ({state}); nothing to abort", 409)
    marker = actions.request_abort(request.app.state.layout, run_dir.name)
    return JSONResponse({"id": run_dir.name, "marker": str(marker)}, status_code=202)


async def retry(request: Request) -> Response:
    """``hopper retry``: the finished job's prompt back into the inbox, as a new job."""
    run_dir = job_dir(request)
    try:
        path = resubmit(request.app.state.layout, run_dir.name)
    except JobStillActive as exc:
        raise Refused(exc.render(), 409) from None
    except CannotResubmit as exc:
        raise Refused(exc.render(), 422) from None
    except NotARealFolder as exc:  # its inbox folder is a link: nothing written
        raise Refused(exc.render(), 409) from None
    except HopperError as exc:  # JobNotFound: vanished since the id was checked
        raise Refused(exc.render(), 404) from None
    return JSONResponse({"id": run_dir.name, "path": str(path)}, status_code=201)


async def read_body(request: Request) -> object:
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > BODY_MAX):
        raise Refused(f"the request body is over {BODY_MAX} bytes", 413)
    data = b""
    async for chunk in request.stream():
        data += chunk
        if len(data) > BODY_MAX:
            raise Refused(f"the request body is over {BODY_MAX} bytes", 413)
    if not data.strip():
        return {}
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise Refused(f"the request body is not JSON: {exc}") from None


async def submit(request: Request) -> Response:
    payload = await read_body(request)
    path = actions.submit(request.app.state.layout, request.app.state.config, payload)
    return JSONResponse({"path": str(path)}, status_code=201)


async def pause(request: Request) -> Response:
    return await _set_pause(request, True)


async def resume(request: Request) -> Response:
    return await _set_pause(request, False)


async def _set_pause(request: Request, paused: bool) -> Response:
    payload = await read_body(request)
    group = payload.get("group") if isinstance(payload, dict) else None
    if group is not None and not isinstance(group, str):
        raise Refused("group: an inbox sub-folder name, as a string")
    marker = actions.set_pause(request.app.state.layout, paused, group or None)
    request.app.state.hub.hint("\0root", "PAUSE")
    return JSONResponse({"paused": paused, "group": group or None, "marker": str(marker)})


async def usage(request: Request) -> Response:
    wanted, _ = job_filter(request)
    by_name = request.query_params.get("by", GroupBy.AGENT.value)
    try:
        by = GroupBy(by_name)
    except ValueError:
        raise Refused(f"by: one of {', '.join(g.value for g in GroupBy)}") from None
    catalog: Catalog = request.app.state.catalog
    jobs = await catalog.call(Catalog.summaries)
    rows, total = tally([j for j in jobs if wanted.matches(j)], by)
    return JSONResponse(
        {"by": by.value, "rows": [asdict(r) for r in rows], "total": asdict(total)},
        headers={"cache-control": "no-store"},
    )
