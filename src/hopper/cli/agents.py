"""``hopper agents [list]`` and ``hopper agents install``: which CLI runs each agent; install them.

``list`` shows every agent the config knows (bash, claude, codex, custom ones),
the binary each resolves to and where that came from (the config's ``bin``,
PATH, ``hopper agents install``, a checkout's tools/agents), and its
``--version``. ``install`` puts the pinned Claude Code and Codex CLIs where
hopper looks for them (see :mod:`hopper.agents.npm`); it needs npm.

Exit codes: 0 done (list: always, missing CLIs included), 1 the install
failed, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hopper.agents import npm
from hopper.agents.driven import find_binary
from hopper.cli.common import EXIT_FAILED, EXIT_OK, add_root_args, warn
from hopper.cli.doctor.agents import agent_version
from hopper.config import Config, load_config
from hopper.core.prompt import BadPrompt
from hopper.core.terminal import terminal_safe

INSTALL_HINT = "not installed: hopper agents install"


@dataclass(frozen=True)
class AgentInfo:
    name: str
    kind: str  # bash, claude, codex, custom
    bin: str | None
    source: str  # config, PATH, user install, hopper install, tools/agents, missing
    version: str


def register(sub: Any) -> None:
    p = sub.add_parser("agents", help="list the agents and their CLIs; install the CLIs")
    add_root_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object per agent, as a list")
    p.set_defaults(handler=handle_list)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    listing = actions.add_parser("list", help="which binary runs each agent, and its version")
    add_root_args(listing)
    listing.add_argument("--json", action="store_true", help="one JSON object per agent")
    listing.set_defaults(handler=handle_list)
    inst = actions.add_parser(
        "install", help="install the pinned claude and codex CLIs with npm, where hopper finds them"
    )
    where = inst.add_mutually_exclusive_group()
    where.add_argument(
        "--prefix",
        metavar="DIR",
        help="install into DIR (default: $XDG_DATA_HOME/hopper/agents, for this user)",
    )
    where.add_argument(
        "--system",
        action="store_true",
        help=f"install beside this hopper ({npm.system_dir()}), for every user of it",
    )
    inst.add_argument("--dry-run", action="store_true", help="print what would run, change nothing")
    inst.set_defaults(handler=handle_install)


# -- list ----------------------------------------------------------------------------


def source_of(binary: str, configured: str | None) -> str:
    if configured:
        return "config"
    path = Path(binary)
    for label, folder in (
        ("hopper agents install", npm.user_dir(os.environ)),
        ("hopper agents install --system", npm.system_dir()),
        ("tools/agents", npm.REPO_TOOLS),
    ):
        if folder in path.parents:
            return label
    return "PATH"


def describe(config: Config) -> list[AgentInfo]:
    """Every agent of ``config``: what runs it (looked up as the watcher would, in this
    process's environment). Runs each found CLI's ``--version``."""
    bash = shutil.which("bash")
    infos = [AgentInfo("bash", "bash", bash, "PATH" if bash else "missing", _bash_version(bash))]
    for name in npm.PACKAGES:
        table = config.agents.get(name)
        configured = table.bin if table else None
        try:
            binary = find_binary(name, configured)
        except BadPrompt:
            infos.append(AgentInfo(name, name, None, "missing", INSTALL_HINT))
            continue
        try:
            version = agent_version(binary)
        except (OSError, subprocess.TimeoutExpired) as exc:
            version = f"does not run: {exc}"
        infos.append(AgentInfo(name, name, binary, source_of(binary, configured), version))
    for name, table in sorted(config.agents.items()):
        if table.argv:
            found = shutil.which(os.path.expanduser(table.argv[0]))
            infos.append(
                AgentInfo(
                    name,
                    "custom",
                    found,
                    "config" if found else "missing",
                    "-" if found else f"{table.argv[0]!r} is not an executable",
                )
            )
    return infos


def _bash_version(bash: str | None) -> str:
    if bash is None:
        return "not on PATH: bash jobs cannot run"
    try:
        return agent_version(bash)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"does not run: {exc}"


def handle_list(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    infos = describe(config)
    if args.json:
        print(json.dumps([asdict(i) for i in infos], indent=2))
        return EXIT_OK
    rows: list[tuple[str, ...]] = [("AGENT", "BIN", "FROM", "VERSION")]
    rows += [  # a version is whatever the binary printed
        tuple(terminal_safe(c) for c in (i.name, i.bin or "-", i.source, i.version)) for i in infos
    ]
    widths = [max(len(r[c]) for r in rows) for c in range(3)]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=False)) + "  " + r[3])
    return EXIT_OK


# -- install -------------------------------------------------------------------------


def handle_install(args: argparse.Namespace) -> int:
    if args.system:
        prefix = npm.system_dir()
    elif args.prefix:
        prefix = Path(args.prefix).expanduser().absolute()
    else:
        prefix = npm.user_dir(os.environ)
    manifest, _ = npm.pinned_only(*npm.shipped())
    pins = ", ".join(f"{pkg}@{ver}" for pkg, ver in manifest["dependencies"].items())
    print(f"installing {pins} into {prefix}")
    print("$ " + " ".join(npm.ci_argv(prefix)), flush=True)
    if args.dry_run:
        return EXIT_OK
    try:
        binaries = npm.install(prefix)
    except (npm.InstallFailed, OSError) as exc:
        warn(f"agents install: {exc}")
        return EXIT_FAILED
    for name, path in binaries.items():
        print(f"{name}: {path} ({agent_version(str(path))})")
        first = shutil.which(name)
        if first and Path(first) != path:
            print(
                f"  note: {first} is on PATH and is found first; "
                f"to use this one set [agents.{name}] bin = {str(path)!r} in the config"
            )
    if prefix not in (npm.user_dir(os.environ), npm.system_dir()):
        print(
            f"note: hopper does not look in {prefix} by itself: "
            "set [agents.NAME] bin in the config to these paths"
        )
    sys.stdout.flush()
    return EXIT_OK
