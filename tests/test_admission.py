"""core/admission.py: front matter > inbox route > config, and what start needs. Pure."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hopper.config import Config, Route, SlurmConfig
from hopper.core.admission import Admission, Refusal, StartSpec, admit, settings_for
from hopper.core.prompt import parse
from hopper.core.record import ContainerJob, JobHooks
from hopper.core.states import Reason

AGENTS = ("bash", "claude", "codex")
JOB = "20261123-140000-000-x-abcd"


def front(**keys: object) -> bytes:
    """A prompt whose front matter holds ``keys`` (TOML via JSON: strings, ints, lists)."""
    lines = "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())
    return f"+++\n{lines}+++\necho body\n".encode()


def settings(
    data: bytes, config: Config, inbox: str = "inbox/acme/app/x.prompt.md"
) -> dict[str, object]:
    return settings_for(parse(data), inbox, config)


def admitted(
    data: bytes, config: Config | None = None, inbox: str = "inbox/x.prompt.md"
) -> Admission:
    verdict = admit(data, job_id=JOB, inbox_path=inbox, config=config or Config(), agents=AGENTS)
    assert isinstance(verdict, Admission), verdict
    return verdict


def refused(data: bytes, config: Config | None = None, inbox: str = "inbox/x.prompt.md") -> Refusal:
    verdict = admit(data, job_id=JOB, inbox_path=inbox, config=config or Config(), agents=AGENTS)
    assert isinstance(verdict, Refusal), verdict
    return verdict


# key in the front matter, the route and the config; the record field; three values
LAYERED = [
    ("agent", "agent", "default_agent", ("codex", "claude", "bash")),
    ("workdir", "workdir", "workdir", ("/fm", "/route", "/config")),
    ("timeout", "timeout_seconds", "timeout", (30, 60.0, 90.0)),
    ("executor", "executor", "executor", ("slurm", "local", "slurm")),
]


@pytest.mark.parametrize(("key", "field", "config_key", "values"), LAYERED)
def test_front_matter_beats_route_beats_config(
    key: str, field: str, config_key: str, values: tuple[object, object, object]
) -> None:
    fm, routed, configured = values
    config = Config.model_validate({config_key: configured, "routes": {"acme": {key: routed}}})
    bare = Config.model_validate({config_key: configured})
    assert settings(front(**{key: fm}), config)[field] == fm
    assert settings(front(), config)[field] == routed
    assert settings(front(), bare)[field] == configured
    assert settings(front(), config, inbox="inbox/other/x.prompt.md")[field] == configured


@pytest.mark.parametrize(
    ("key", "field", "values", "fallback"),
    [
        ("priority", "priority", (5, -3), 0),
        ("group", "group", ("fm-group", "route-group"), "acme"),  # else the first folder
        ("workspace", "workspace", ("folder", "worktree"), "none"),
    ],
)
def test_front_matter_beats_route_beats_default(
    key: str, field: str, values: tuple[object, object], fallback: object
) -> None:
    fm, routed = values
    config = Config.model_validate({"routes": {"acme": {key: routed}}})
    assert settings(front(**{key: fm}), config)[field] == fm
    assert settings(front(), config)[field] == routed
    assert settings(front(), Config())[field] == fallback


def test_front_matter_beats_config_for_keys_routes_lack() -> None:
    config = Config(retries=3, memory_max=1 << 30, output_max=1 << 20)
    got = settings(front(retries=1, memory_max="2G", output_max="none"), config)
    assert (got["retries"], got["memory_max_bytes"], got["output_max_bytes"]) == (1, 2 << 30, None)
    got = settings(front(), config)
    assert (got["retries"], got["memory_max_bytes"], got["output_max_bytes"]) == (
        3,
        1 << 30,
        1 << 20,
    )
    assert settings(front(retries=0), config)["retries"] == 0  # 0 is a value, not "unset"


def test_defaults_of_a_prompt_without_front_matter() -> None:
    got = settings(b"just a task\n", Config(), inbox="inbox/fix-tests.prompt.md")
    assert got == {
        "name": "fix-tests",
        "agent": "claude",
        "workdir": None,
        "timeout_seconds": None,
        "retries": 0,
        "session": None,
        "priority": 0,
        "group": None,
        "after": [],
        "retry_of": None,
        "workspace": "none",
        "repo": None,
        "ref": None,
        "branch": None,
        "memory_max_bytes": 6 << 30,
        "output_max_bytes": 100 << 20,
        "executor": "local",
        "hooks": None,
        "max_cost_usd": None,
        "max_tokens": None,
    }


def test_name_session_after_hooks_and_retry_of_come_from_the_front_matter() -> None:
    data = front(
        name="nightly",
        session="s1",
        after=["a", "b"],
        on_failure=["notify", "x"],
        retry_of="20260101-000000-000-y-0000",
    )
    got = settings(data, Config())
    assert (got["name"], got["session"], got["after"]) == ("nightly", "s1", ["a", "b"])
    assert got["hooks"] == JobHooks(on_failure=["notify", "x"])
    assert got["retry_of"] == "20260101-000000-000-y-0000"


def test_route_placeholders_fill_workdir_ref_and_group() -> None:
    route = Route(workdir="~/src/{owner}/{repo}", ref="{branch}", group="{repo}-{missing}")
    config = Config(routes={"{owner}/{repo}/{branch}": route})
    got = settings(front(workspace="worktree"), config, inbox="inbox/acme/app/main/x.prompt.md")
    assert got["workdir"] == got["repo"] == "~/src/acme/app"
    assert got["ref"] == "main"
    assert got["group"] == "app-{missing}"  # an unknown placeholder stays as written
    assert got["branch"] is None
    # the front matter's own values are taken as written, never filled
    got = settings(
        front(workspace="worktree", ref="dev", workdir="/x/{repo}", branch="b"),
        config,
        inbox="inbox/acme/app/main/x.prompt.md",
    )
    assert (got["ref"], got["workdir"], got["branch"]) == ("dev", "/x/{repo}", "b")


def test_ref_branch_and_repo_only_for_worktrees() -> None:
    config = Config(routes={"acme": Route(ref="main", workdir="/repo")})
    got = settings(front(branch="b", ref="r"), config)
    assert (got["repo"], got["ref"], got["branch"]) == (None, None, None)
    got = settings(front(workspace="worktree"), config)
    assert (got["repo"], got["ref"]) == ("/repo", "main")


def test_the_longest_route_wins() -> None:
    config = Config(routes={"acme": Route(agent="codex"), "acme/app": Route(agent="bash")})
    assert settings(front(), config)["agent"] == "bash"
    assert settings(front(), config, inbox="inbox/acme/web/x.prompt.md")["agent"] == "codex"


# -- admit: verdicts ----------------------------------------------------------------


def test_admission_keeps_the_prompt_as_parsed_for_start() -> None:
    data = b'+++\nagent = "bash"\nenv = { TOKEN = "t0" }\n+++\necho "$TOKEN"\n'
    verdict = admitted(data)
    assert verdict.start.job_id == JOB
    assert verdict.start.prompt() == parse(data)
    assert verdict.settings["agent"] == "bash"
    assert "env" not in verdict.settings  # env goes to the start spec only, never the record


def test_unparsable_prompt_is_refused_without_settings() -> None:
    verdict = refused(b"+++\nagent = \n+++\nx\n", inbox="inbox/a/x.prompt.md")
    assert verdict.reason is Reason.BAD_PROMPT
    assert verdict.detail.startswith("inbox/a/x.prompt.md:2: front matter is not valid TOML")
    assert verdict.settings == {}


def test_unknown_agent_is_refused_with_its_settings() -> None:
    verdict = refused(front(agent="gpt9", name="n"))
    assert verdict.reason is Reason.UNKNOWN_AGENT
    assert (
        verdict.detail == "inbox/x.prompt.md: unknown agent 'gpt9'; available: bash, claude, codex"
    )
    assert verdict.settings["name"] == "n"


def test_unknown_default_agent_from_a_route_is_refused() -> None:
    config = Config(routes={"a": Route(agent="nope")})
    assert refused(b"task\n", config, inbox="inbox/a/x.prompt.md").reason is Reason.UNKNOWN_AGENT


def test_slurm_resources_are_merged_and_checked_at_admission() -> None:
    config = Config(slurm=SlurmConfig(cpus=2, gres="gpu:1"))
    got = admitted(front(agent="bash", executor="slurm", mem="4G"), config)
    assert got.settings["slurm_resources"] == {"mem": "4G", "cpus": 2, "gres": "gpu:1"}
    assert "slurm_resources" not in admitted(front(agent="bash"), config).settings
    bad = refused(front(agent="bash", cpus=2))
    assert bad.reason is Reason.BAD_PROMPT and "cpus only apply to Slurm jobs" in bad.detail
    assert bad.settings["executor"] == "local"
    bad = refused(front(agent="bash", executor="slurm", gres="gpu;rm"))
    assert "gres must look like gpu:1" in bad.detail


@pytest.mark.parametrize("keys", [{"check": ["pytest"]}, {"max_nudges": 1}, {"on_idle": "nudge"}])
def test_bash_refuses_agent_only_keys(keys: dict[str, object]) -> None:
    verdict = refused(front(agent="bash", **keys))
    assert verdict.reason is Reason.BAD_PROMPT and "a bash job cannot be nudged" in verdict.detail
    admitted(front(agent="claude", **keys))  # an agent job can be nudged


def test_nothing_to_run_is_refused_at_admission() -> None:
    bash = refused(b'+++\nagent = "bash"\n+++\n```bash\n\n```\n')
    assert bash.reason is Reason.BAD_PROMPT and "has no script to run" in bash.detail
    agent = refused(b'+++\nagent = "claude"\n+++\n  \n')
    assert agent.reason is Reason.BAD_PROMPT and "has no prompt text" in agent.detail


# -- properties ---------------------------------------------------------------------

_opt = st.none() | st.integers(min_value=-1000, max_value=1000)


@given(fm=_opt, routed=_opt)
def test_priority_is_the_first_given_layer(fm: int | None, routed: int | None) -> None:
    config = Config(routes={"acme": Route(priority=routed)})
    data = front(**({"priority": fm} if fm is not None else {}))
    expect = fm if fm is not None else routed if routed is not None else 0
    assert settings(data, config)["priority"] == expect


_seconds = st.none() | st.integers(min_value=1, max_value=10**6)


@given(fm=_seconds, routed=_seconds, configured=_seconds)
def test_timeout_is_the_first_given_layer(
    fm: int | None, routed: int | None, configured: int | None
) -> None:
    config = Config(timeout=configured, routes={"acme": Route(timeout=routed)})
    data = front(**({"timeout": fm} if fm is not None else {}))
    layers = [v for v in (fm, routed, configured) if v is not None]
    assert settings(data, config)["timeout_seconds"] == (layers[0] if layers else None)


_env_key = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True).filter(
    lambda k: not k.upper().startswith("HOPPER_")
)
_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\x7f"))


@given(body=_text, env=st.dictionaries(_env_key, _text, max_size=5))
def test_start_spec_survives_its_file(body: str, env: dict[str, str]) -> None:
    """What admission.json holds is exactly the prompt parsed at claim."""
    table = ", ".join(f"{k} = {json.dumps(v, ensure_ascii=False)}" for k, v in env.items())
    data = f'+++\nagent = "claude"\nenv = {{ {table} }}\n+++\n{body}x\n'.encode()
    spec = parse(data)
    start = StartSpec.of(JOB, spec)
    again = StartSpec.model_validate_json(start.model_dump_json().encode())
    assert again == start
    assert again.prompt() == spec


def test_container_requests_are_checked_at_admission() -> None:
    config = Config.model_validate({"container": {"image": "python:3.12-slim"}})
    got = admitted(front(agent="bash", executor="container", cpus=2, network="none"), config)
    container = got.settings["container"]
    assert isinstance(container, ContainerJob)
    assert container.image == "python:3.12-slim"
    assert (container.cpus, container.network, container.name) == (2, "none", f"hopper-{JOB}")
    assert got.settings["slurm_resources"] == {}  # cpus went to the engine, not Slurm
    bad = refused(front(agent="bash", executor="container"))
    assert bad.reason is Reason.BAD_PROMPT and "a container job needs an image" in bad.detail
    bad = refused(front(agent="bash", image="x"))
    assert "image only apply to container jobs" in bad.detail
