"""mode = "interactive": front matter > route > [agents.NAME] mode; the session executor."""

from __future__ import annotations

from hopper.config import AgentConfig, Config, Route
from hopper.core.admission import SESSION_EXECUTOR
from hopper.core.states import Reason
from test_admission import admitted, front, refused


def test_headless_is_the_default() -> None:
    assert admitted(front(agent="claude")).settings["executor"] == "local"


def test_interactive_in_front_matter_runs_on_the_session_executor() -> None:
    verdict = admitted(front(agent="claude", mode="interactive", session="review"))
    assert verdict.settings["executor"] == SESSION_EXECUTOR
    assert verdict.settings["session"] == "review"


def test_the_agents_table_and_the_route_set_the_mode_and_front_matter_wins() -> None:
    config = Config(
        agents={"claude": AgentConfig(mode="interactive")},
        routes={"chat": Route(mode="headless")},
    )
    assert admitted(front(agent="claude"), config).settings["executor"] == SESSION_EXECUTOR
    routed = admitted(front(agent="claude"), config, inbox="inbox/chat/x.prompt.md")
    assert routed.settings["executor"] == "local"
    mine = admitted(front(agent="claude", mode="interactive"), config, "inbox/chat/x.prompt.md")
    assert mine.settings["executor"] == SESSION_EXECUTOR


def test_interactive_with_another_executor_is_a_bad_prompt() -> None:
    verdict = refused(front(agent="claude", mode="interactive", executor="slurm"))
    assert verdict.reason is Reason.BAD_PROMPT
    assert "runs the agent in a terminal on this host" in verdict.detail


def test_a_bash_job_cannot_be_interactive() -> None:
    verdict = refused(front(agent="bash", mode="interactive"))
    assert verdict.reason is Reason.BAD_PROMPT and "'mode'" in verdict.detail


def test_an_unknown_mode_names_the_choices() -> None:
    verdict = refused(front(agent="claude", mode="chatty"))
    assert verdict.reason is Reason.BAD_PROMPT and "headless" in verdict.detail
