"""``hopper config check|show|template``: validate, print and start a config file.

``check`` reads the file the watcher would read (``--config``, ``$HOPPER_CONFIG``,
``~/.config/hopper/config.toml``, ``/etc/hopper/config.toml``) and says whether
it is valid; ``show`` prints the effective values as TOML (or ``--json``) with
the values of secret-looking environment keys masked; ``template`` prints a
config file with every key commented out at its default (install.sh writes
it to ``/etc/hopper/config.toml``).

Exit codes: 0 valid, 1 invalid (the message names the file and the key), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from hopper.agents.registry import builtin_agents
from hopper.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, add_root_args
from hopper.config import Config, config_path, load_config
from hopper.errors import ConfigError
from hopper.store.layout import resolve_root

#: An environment key whose value is a secret: masked by ``show``.
SECRET_KEY = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)
MASK = "***"
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def register(sub: Any) -> None:
    p = sub.add_parser("config", help="check or show the configuration")
    p.set_defaults(handler=lambda args: _usage(p))
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    check = actions.add_parser("check", help="validate the config file (exit 1 if invalid)")
    add_root_args(check)
    check.set_defaults(handler=handle_check)
    show = actions.add_parser("show", help="print the effective config, secrets masked")
    add_root_args(show)
    show.add_argument("--json", action="store_true", help="JSON instead of TOML")
    show.set_defaults(handler=handle_show)
    template = actions.add_parser(
        "template", help="print a config file with every key commented out at its default"
    )
    template.set_defaults(handler=handle_template)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


# -- check ---------------------------------------------------------------------


def check_config(cli: str | None, env: Mapping[str, str]) -> tuple[Config, list[str]]:
    """The validated config and warnings; raises :class:`ConfigError` if it is invalid.

    Beyond the schema, the default agent must be one hopper knows.
    """
    config = load_config(cli, env)
    path = config_path(cli, env)
    agents = builtin_agents(config)
    if config.default_agent not in agents:
        raise ConfigError(
            f"key 'default_agent': unknown agent {config.default_agent!r}",
            path=path,
            hint=f"available: {', '.join(sorted(agents))}, or define it under [agents.NAME]",
        )
    warnings: list[str] = []
    if path is not None and _has_secrets(config) and path.stat().st_mode & 0o004:
        warnings.append(
            f"{path}: holds secret-looking env values and is readable by everyone; "
            f"chmod 600 {path}, or move the keys to /etc/hopper/env (EnvironmentFile=)"
        )
    return config, warnings


def handle_check(args: argparse.Namespace) -> int:
    try:
        config, warnings = check_config(args.config, os.environ)
    except ConfigError as exc:
        print(f"invalid: {exc}", file=sys.stderr)
        return EXIT_FAILED
    path = config_path(args.config, os.environ)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if path is None:
        print("ok: no config file; the built-in defaults apply")
    else:
        changed = len(config.model_fields_set)
        print(f"ok: {path} is valid ({changed} top-level keys set, the rest default)")
    return EXIT_OK


# -- show ----------------------------------------------------------------------


def redact(value: Any, in_env: bool = False) -> Any:
    """``value`` (plain JSON data) with secret-looking keys of every ``env`` table masked."""
    if isinstance(value, dict):
        return {
            k: (
                MASK
                if in_env and isinstance(v, str) and SECRET_KEY.search(k)
                else redact(v, in_env=k == "env")
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def effective(config: Config) -> dict[str, Any]:
    """Every value in effect, as JSON data, secrets masked; unset (None) keys left out."""
    data: dict[str, Any] = redact(config.model_dump(mode="json", exclude_none=True))
    return data


def handle_show(args: argparse.Namespace) -> int:
    try:
        config, _ = check_config(args.config, os.environ)
    except ConfigError as exc:
        print(f"invalid: {exc}", file=sys.stderr)
        return EXIT_FAILED
    data = effective(config)
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
        return EXIT_OK
    path = config_path(args.config, os.environ)
    root = resolve_root(args.root, os.environ, config.root)
    print(f"# from: {path if path else 'no config file (built-in defaults)'}")
    print(f"# root in effect: {root}")
    print("# durations are in seconds; secret-looking env values are masked")
    print(to_toml(data), end="")
    return EXIT_OK


def _has_secrets(config: Config) -> bool:
    return effective(config) != config.model_dump(mode="json", exclude_none=True)


# -- TOML output -----------------------------------------------------------------


def toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def toml_value(value: Any) -> str:
    """One TOML value: JSON's string escapes are valid TOML basic-string escapes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items())
        return "{" + items + "}"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def to_toml(data: Mapping[str, Any], path: tuple[str, ...] = ()) -> str:
    """``data`` as a TOML document: scalars first, then one table per nested dict.

    Empty tables are left out (an absent table means the same thing).
    """
    lines: list[str] = []
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in data.items() if isinstance(v, dict) and v}
    if path and scalars:
        lines.append(f"\n[{'.'.join(toml_key(p) for p in path)}]")
    lines.extend(f"{toml_key(k)} = {toml_value(v)}" for k, v in scalars.items())
    text = "\n".join(lines) + ("\n" if lines else "")
    for key, table in tables.items():
        text += to_toml(table, (*path, key))
    return text


# -- template --------------------------------------------------------------------


def template(model: type[BaseModel] = Config, prefix: str = "") -> str:
    """A config file with every key commented out at its default, with its meaning.

    ``## `` lines explain; uncommenting the ``# key = value`` and ``# [table]``
    lines gives a valid file with the same values. Keys unset by default get
    an explanation only.
    """
    head: list[str] = []
    tail: list[str] = []
    for name, field in model.model_fields.items():
        about = _describe(field)
        default = field.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            tail += ["", f"## {about}" if about else "##", f"# [{prefix}{name}]"]
            tail.append(template(type(default), f"{prefix}{name}.").rstrip("\n"))
        elif isinstance(default, dict):
            tail += ["", f"## {about} (empty by default)", f"# [{prefix}{name}]"]
        elif default is None:
            head.append(f"## {name}: not set" + (f"; {about}" if about else ""))
            head.append("")
        else:
            if about:
                head.append(f"## {about}")
            shown = duration_text(default) if _is_duration(field) else _plain(default)
            head.append(f"# {name} = {toml_value(shown)}")
            head.append("")
    return "\n".join(head + tail).strip("\n") + "\n"


def duration_text(seconds: float) -> str:
    """``3600`` -> ``"1h"``, ``90`` -> ``"90s"``, ``0.25`` -> ``"0.25s"``: parse_duration forms."""
    if seconds >= 60 and seconds == int(seconds):
        whole = int(seconds)
        hours, rest = divmod(whole, 3600)
        minutes, secs = divmod(rest, 60)
        if secs == 0:
            return (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    return f"{seconds:g}s"


def _is_duration(field: FieldInfo) -> bool:
    return any(
        getattr(getattr(m, "func", None), "__name__", "") == "_seconds" for m in field.metadata
    )


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    return value


def _describe(field: FieldInfo) -> str:
    return (field.description or "").replace("\n", " ")


TEMPLATE_HEADER = """\
# hopper's configuration (TOML). Every key is optional: the "# key = value"
# lines show the built-in defaults, "##" lines say what they mean. Uncomment
# and change what you need, check it, and reload the watcher:
#   hopper config check        (exit 0 if valid; else it names the file and key)
#   systemctl reload hopper
# Durations are "90s", "45m", "1h30m" or seconds. Keys: docs/configuration.md.
# API keys do not belong here: put them in /etc/hopper/env (mode 600) or, for
# the user service, ~/.config/hopper/env.

"""


def handle_template(args: argparse.Namespace) -> int:
    print(re.sub(r"\n{3,}", "\n\n", TEMPLATE_HEADER + template()), end="")
    return EXIT_OK
