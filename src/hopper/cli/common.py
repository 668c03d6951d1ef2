"""What every command shares: root and config resolution, finding a job, printing."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from hopper.configfile import NeedsModel, config_root
from hopper.core.terminal import terminal_safe
from hopper.errors import HopperError, JobFileCorrupt
from hopper.store import lookup
from hopper.store.jobread import read_view
from hopper.store.layout import Layout, resolve_root

if TYPE_CHECKING:  # the read commands (status, events, logs) never load the models
    from hopper.config import Config
    from hopper.core.jobview import JobView
    from hopper.core.record import JobRecord

# The exit codes of every command (README.md, "Exit codes", lists them; keep both in step).
EXIT_OK = 0
EXIT_FAILED = 1  # what was asked for failed; a job waited for or followed did not succeed
EXIT_USAGE = 2
EXIT_TIMEOUT = 3  # --timeout ran out before the job(s) ended
EXIT_INTERRUPTED = 130  # Ctrl+C (SIGINT)


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


def add_json_arg(parser: argparse.ArgumentParser, shape: str) -> None:
    """``--json``: the command's answer as one JSON object on stdout (``shape`` says
    its keys); errors stay on stderr with the same exit codes."""
    parser.add_argument("--json", action="store_true", help=f"print {shape} as JSON")


def print_json(answer: object) -> None:
    import json

    print(json.dumps(answer, indent=2))


def context(args: argparse.Namespace) -> tuple[Layout, Config]:
    from hopper.config import load_config

    config = load_config(args.config)
    return Layout(resolve_root(args.root, os.environ, config.root)), config


def read_context(args: argparse.Namespace) -> Layout:
    """The root for a command that only reads it: the config's ``root`` read without
    the model (``configfile.py``); a config it cannot read plainly gets the model's error."""
    try:
        root = config_root(args.config)
    except NeedsModel:
        return context(args)[0]
    return Layout(resolve_root(args.root, os.environ, root))


def all_records(layout: Layout) -> list[JobRecord]:
    return lookup.read_all(layout, on_corrupt=_warn_corrupt)


def find_job(layout: Layout, ref: str) -> JobRecord:
    """An exact id, a unique id prefix, or a name (its newest job); any letter case."""
    return lookup.find_job(layout, ref, on_corrupt=_warn_corrupt)


def find_view(layout: Layout, ref: str) -> JobView:
    """:func:`find_job` on the read path: job.json read without the model if it can be."""
    return lookup.find_with(layout, ref, read_view, on_corrupt=_warn_corrupt)


def _warn_corrupt(exc: JobFileCorrupt) -> None:
    warn(str(exc))


def warn(message: str) -> None:
    """``message`` on stderr, its control characters escaped (a name in it cannot
    drive the terminal); lines stay lines."""
    print(f"hopper: {terminal_safe(message, lines=True)}", file=sys.stderr)


def fail(exc: HopperError | str, code: int = EXIT_FAILED) -> int:
    warn(str(exc))
    return code


def run_dir_of(layout: Layout, record: JobRecord) -> Path:
    return layout.run_dir(record.id)
