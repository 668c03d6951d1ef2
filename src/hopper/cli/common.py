"""What every command shares: root and config resolution, finding a job, printing."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from hopper.config import Config, load_config
from hopper.core.record import JobRecord
from hopper.errors import HopperError, JobFileCorrupt
from hopper.store import lookup
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
    return lookup.read_all(layout, on_corrupt=_warn_corrupt)


def find_job(layout: Layout, ref: str) -> JobRecord:
    """An exact id, a unique id prefix, or a name (its newest job); any letter case."""
    return lookup.find_job(layout, ref, on_corrupt=_warn_corrupt)


def _warn_corrupt(exc: JobFileCorrupt) -> None:
    warn(str(exc))


def warn(message: str) -> None:
    print(f"hopper: {message}", file=sys.stderr)


def fail(exc: HopperError | str, code: int = EXIT_FAILED) -> int:
    warn(str(exc))
    return code


def run_dir_of(layout: Layout, record: JobRecord) -> Path:
    return layout.run_dir(record.id)
