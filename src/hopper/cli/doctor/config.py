"""The check of the configuration file."""

from __future__ import annotations

from collections.abc import Mapping

from hopper.cli.config import check_config
from hopper.cli.doctor.check import Check, ok
from hopper.config import Config, config_path
from hopper.errors import ConfigError


def check_configuration(cli: str | None, env: Mapping[str, str]) -> tuple[Check, Config | None]:
    try:
        config, warnings = check_config(cli, env)
    except ConfigError as exc:
        return (
            Check(
                "config",
                "fail",
                exc.render().replace("\n  hint: ", "; "),
                "fix the key named; hopper config check shows the result",
            ),
            None,
        )
    path = config_path(cli, env)
    if warnings:
        return Check("config", "warn", warnings[0], "chmod 600 the file"), config
    where = f"{path} is valid" if path else "no config file: the built-in defaults apply"
    return ok("config", where), config
