"""What every command shares: root and config resolution, finding a job, printing."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from hopper.config import Config, load_config
from hopper.core.record import JobRecord
from hopper.errors import HopperError, JobFileCorrupt, JobNotFound
from hopper.store.jobfile import iter_run_dirs, read_record
from hopper.store.layout import Layout, resolve_root

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def add_root_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root",
        help="state root (default: $HOPPER_ROOT, the config's root, else $XDG_STATE_HOME/hopper)",
    )
    parser.add_argument(
        "--config",
        help="config file (default: $HOPPER_CONFIG, "
        "~/.config/hopper/config.toml, /etc/hopper/config.toml)",
    )


def context(args: argparse.Namespace) -> tuple[Layout, Config]:
    config = load_config(args.config)
    return Layout(resolve_root(args.root, os.environ, config.root)), config


def all_records(layout: Layout) -> list[JobRecord]:
    records = []
    for run_dir in iter_run_dirs(layout.runs):
        try:
            records.append(read_record(run_dir))
        except FileNotFoundError:
            continue  # a claim in progress
        except JobFileCorrupt as exc:
            warn(str(exc))
    return records


def find_job(layout: Layout, ref: str) -> JobRecord:
    """An exact id, a unique id prefix, or a name (its newest job)."""
    if "/" not in ref and not ref.startswith("."):
        try:
            return read_record(layout.run_dir(ref))
        except FileNotFoundError:
            pass
    records = all_records(layout)
    by_prefix = [r for r in records if r.id.startswith(ref)]
    if len(by_prefix) == 1:
        return by_prefix[0]
    if len(by_prefix) > 1:
        raise JobNotFound(
            f"{ref!r} matches {len(by_prefix)} jobs",
            hint="give more of the id: " + ", ".join(r.id for r in by_prefix[:5]),
        )
    by_name = [r for r in records if r.name == ref]
    if by_name:
        return by_name[-1]
    raise JobNotFound(
        f"no job with id, id prefix or name {ref!r} under {layout.runs}",
        hint="hopper status lists the jobs",
    )


def warn(message: str) -> None:
    print(f"hopper: {message}", file=sys.stderr)


def fail(exc: HopperError | str, code: int = EXIT_FAILED) -> int:
    warn(str(exc))
    return code


def run_dir_of(layout: Layout, record: JobRecord) -> Path:
    return layout.run_dir(record.id)
