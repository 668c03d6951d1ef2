"""``hopper doctor``: check a root and its environment, and say how to fix each problem.

Each check is a function that returns :class:`Check` values (ok, warn or fail,
a one-line finding, and a fix for anything not ok). What a check reads from
the machine (``stat``, free space, ``/proc``, the process table, an agent's
``--version``) is a parameter, so each problem can be shown in a test. The
checks live in modules named after what they check (``root``, ``config``,
``agents``, ``watcher``, ``systemd``); this module runs them in order and
prints the report.

Exit codes: 0 nothing failed (warnings allowed), 1 at least one check failed,
2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import Any

from hopper.cli.common import EXIT_FAILED, EXIT_OK, add_root_args
from hopper.cli.doctor.agents import check_agents
from hopper.cli.doctor.check import Check
from hopper.cli.doctor.config import check_configuration
from hopper.cli.doctor.root import (
    check_free_space,
    check_inotify,
    check_one_filesystem,
    check_root,
    check_writable,
)
from hopper.cli.doctor.systemd import check_notify_socket
from hopper.cli.doctor.watcher import (
    check_degraded,
    check_watcher_degraded,
    root_watcher_processes,
)
from hopper.config import Config
from hopper.core.terminal import terminal_safe
from hopper.store.layout import Layout, resolve_root


def run_checks(args: argparse.Namespace, env: Mapping[str, str]) -> list[Check]:
    config_check, config = check_configuration(args.config, env)
    effective = config or Config()
    layout = Layout(resolve_root(args.root, env, effective.root))
    checks = check_root(layout)
    if layout.root.is_dir():
        writable = check_writable(layout)
        checks += [
            check_one_filesystem(layout),
            writable,
            check_degraded(writable, lambda: root_watcher_processes(layout, effective.root)),
            check_free_space(layout.root),
            check_inotify(layout),
        ]
    checks.append(config_check)
    checks += check_agents(effective)
    if layout.root.is_dir():
        checks.append(check_watcher_degraded(layout, effective))
    checks.append(check_notify_socket(env))
    return checks


def render(checks: Iterable[Check]) -> str:
    lines = []
    for c in checks:
        # A finding quotes paths and names it found: escaped, one line each.
        lines.append(f"{c.status:<5} {c.name:<12} {terminal_safe(c.message)}")
        if c.fix and c.status != "ok":
            lines.append(f"{'':<5} {'':<12} fix: {terminal_safe(c.fix)}")
    return "\n".join(lines) + "\n"


def register(sub: Any) -> None:
    p = sub.add_parser("doctor", help="check the root, the config and the environment")
    add_root_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object per check, as a list")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    checks = run_checks(args, os.environ)
    if args.json:
        print(json.dumps([asdict(c) for c in checks], indent=2))
    else:
        print(render(checks), end="")
        counts = {s: sum(1 for c in checks if c.status == s) for s in ("ok", "warn", "fail")}
        print(f"doctor: {counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail")
    failed = any(c.status == "fail" for c in checks)
    if failed and not args.json:
        print("hopper doctor: some checks failed (see fix: above)", file=sys.stderr)
    return EXIT_FAILED if failed else EXIT_OK
