"""Per-job spending limits at admission: where max_cost_usd / max_tokens come from, and
the limits hopper could not follow, refused with the fix. Pure."""

from __future__ import annotations

import json

import pytest

from hopper.config import AgentConfig, Config, PriceRow, Route
from hopper.core.admission import Admission, Refusal, admit
from hopper.core.states import Reason

AGENTS = ("bash", "claude", "codex", "bot", "talker")
JOB = "20261126-090000-000-x-abcd"
PRICED = {"gpt-5.5": PriceRow(input_per_mtok=1.25, output_per_mtok=10.0)}


def prompt(**keys: object) -> bytes:
    lines = "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())
    return f"+++\n{lines}+++\nthe task\n".encode()


def verdict(data: bytes, config: Config, inbox: str = "inbox/app/x.prompt.md") -> object:
    return admit(data, job_id=JOB, inbox_path=inbox, config=config, agents=AGENTS)


def limits(data: bytes, config: Config, inbox: str = "inbox/app/x.prompt.md") -> tuple[object, ...]:
    got = verdict(data, config, inbox)
    assert isinstance(got, Admission), got
    return got.settings["max_cost_usd"], got.settings["max_tokens"]


def refusal(data: bytes, config: Config) -> str:
    got = verdict(data, config)
    assert isinstance(got, Refusal), got
    assert got.reason == Reason.BAD_PROMPT
    return got.detail


LAYERS = Config(
    max_cost_usd=4.0,
    max_tokens=4000,
    agents={"claude": AgentConfig(max_cost_usd=3.0, max_tokens=3000)},
    routes={"app": Route(max_cost_usd=2.0, max_tokens=2000)},
)


def test_front_matter_beats_route_beats_agent_beats_config() -> None:
    fm = prompt(agent="claude", max_cost_usd=1.0, max_tokens=1000)
    assert limits(fm, LAYERS) == (1.0, 1000)
    assert limits(prompt(agent="claude"), LAYERS) == (2.0, 2000)
    assert limits(prompt(agent="claude"), LAYERS, "inbox/other/x.prompt.md") == (3.0, 3000)
    assert limits(prompt(agent="claude"), Config(max_cost_usd=4.0)) == (4.0, None)
    assert limits(prompt(agent="claude"), Config()) == (None, None)


def test_a_bash_job_takes_no_default_and_refuses_the_keys() -> None:
    script = b'+++\nagent = "bash"\n+++\necho hi\n'
    assert limits(script, LAYERS) == (None, None)
    detail = refusal(b'+++\nagent = "bash"\nmax_tokens = 5\n+++\necho hi\n', Config())
    assert "'max_tokens' is for agent jobs" in detail and "drop it" in detail


def test_bad_values_name_the_key_and_an_example() -> None:
    detail = refusal(prompt(agent="claude", max_cost_usd=0), Config())
    assert "key 'max_cost_usd'" in detail and "max_cost_usd = 0.50" in detail
    detail = refusal(prompt(agent="claude", max_tokens="lots"), Config())
    assert "key 'max_tokens'" in detail


def test_claude_reports_its_cost() -> None:
    assert limits(prompt(agent="claude", max_cost_usd=0.5), Config()) == (0.5, None)


def test_codex_cost_limit_needs_a_model_and_its_price() -> None:
    detail = refusal(prompt(agent="codex", max_cost_usd=0.5), Config())
    assert "reports tokens only and names no model" in detail
    assert "[agents.codex] model" in detail and "max_tokens instead" in detail
    unpriced = Config(agents={"codex": AgentConfig(model="gpt-9")})
    detail = refusal(prompt(agent="codex", max_cost_usd=0.5), unpriced)
    assert "model 'gpt-9' has no price" in detail and '[prices."gpt-9"]' in detail
    priced = Config(agents={"codex": AgentConfig(model="gpt-5.5")}, prices=PRICED)
    assert limits(prompt(agent="codex", max_cost_usd=0.5), priced) == (0.5, None)


def test_codex_token_limit_needs_no_price() -> None:
    assert limits(prompt(agent="codex", max_tokens=900), Config()) == (None, 900)


@pytest.mark.parametrize("key", ["max_cost_usd", "max_tokens"])
def test_a_text_agent_reports_no_usage(key: str) -> None:
    config = Config(agents={"talker": AgentConfig(argv=["talk"], format="text")})
    detail = refusal(prompt(agent="talker", **{key: 5}), config)
    assert f"{key} cannot be followed: agent 'talker' prints text" in detail
    assert 'format = "claude-jsonl"' in detail


def test_custom_agents_in_a_json_dialect() -> None:
    claude_like = Config(agents={"bot": AgentConfig(argv=["bot"], format="claude-jsonl")})
    assert limits(prompt(agent="bot", max_cost_usd=0.5), claude_like) == (0.5, None)
    codex_like = Config(agents={"bot": AgentConfig(argv=["bot"], format="codex-jsonl")})
    assert "names no model" in refusal(prompt(agent="bot", max_cost_usd=0.5), codex_like)
    assert limits(prompt(agent="bot", max_tokens=10), codex_like) == (None, 10)


def test_a_config_default_is_checked_like_the_front_matter() -> None:
    config = Config(max_cost_usd=1.0)
    assert "names no model" in refusal(prompt(agent="codex"), config)


def test_an_interactive_job_takes_max_tokens_and_a_priced_cost_limit() -> None:
    """The session host follows a turn's tokens from the session log (no cost in it):
    max_tokens is taken from every layer; max_cost_usd needs the agent's model priced,
    else the front matter's is refused with the fix and a default is dropped."""
    assert limits(
        prompt(agent="claude", mode="interactive", session="s", max_tokens=5), LAYERS
    ) == (
        None,
        5,
    )
    detail = refusal(prompt(agent="claude", mode="interactive", max_cost_usd=0.5), LAYERS)
    assert "max_cost_usd cannot be followed" in detail and "names no model" in detail
    assert '[prices."<model>"]' in detail
    got = verdict(prompt(agent="claude", mode="interactive", session="s"), LAYERS)
    assert isinstance(got, Admission), got
    assert (got.settings["max_cost_usd"], got.settings["max_tokens"]) == (None, 2000)
    unpriced = Config(agents={"claude": AgentConfig(model="opus")})
    detail = refusal(prompt(agent="claude", mode="interactive", max_cost_usd=0.5), unpriced)
    assert "model 'opus' has no price" in detail
    priced = Config(agents={"claude": AgentConfig(model="gpt-5.5")}, prices=PRICED)
    interactive = prompt(agent="claude", mode="interactive", max_cost_usd=0.5)
    assert limits(interactive, priced) == (0.5, None)
