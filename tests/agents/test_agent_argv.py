"""The argv of every CLI turn, and the driver spec each adapter writes: recorded, byte for byte.

The table was recorded from hopper at 7ca2156, before each agent's argv moved into
its own module (agents/claude.py, codex.py, custom.py); it must not change by
accident. The CLI's version does not enter the argv: the bins below name two Claude
versions (2.1.197 and 2.1.330) and the same flags follow both.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from hopper.agents import claude, codex, custom
from hopper.agents.argv import CLIS, UnknownKind, cli_for, turn_argv
from hopper.agents.base import JobContext
from hopper.agents.drive import SPEC_FILE
from hopper.agents.registry import builtin_agents
from hopper.agents.stream import DIALECTS
from hopper.config import Config
from hopper.core import prompt as prompts

C330 = "/opt/agents/claude-code-2.1.330/bin/claude"
C197 = "/home/u/.local/share/hopper/agents/claude-code-2.1.197/node_modules/.bin/claude"
CODEX_BIN = "/opt/agents/codex-0.46.0/bin/codex"
RUN = {
    "run_dir": "/r/runs/j1",
    "workdir": "/home/u/app",
    "prompt_file": "/r/runs/j1/prompt.body.md",
    "message_file": "/r/runs/j1/prompt.body.md",
    "job_id": "j1",
}
CLAUDE = {
    **RUN,
    "kind": "claude",
    "bin": C330,
    "permission_mode": "bypassPermissions",
    "model": None,
    "args": [],
}
CLAUDE_MIN = {**RUN, "kind": "claude", "bin": "claude"}
CLAUDE_FULL = {
    **CLAUDE,
    "bin": C197,
    "model": "opus",
    "args": ["--max-turns", "3", "--append-system-prompt", "be brief"],
    "message_file": "/r/runs/j1/nudge-1.md",
}
CODEX = {**RUN, "kind": "codex", "bin": CODEX_BIN, "sandbox": None, "model": None, "args": []}
CODEX_WS = {
    **CODEX,
    "sandbox": "workspace-write",
    "model": "gpt-5",
    "args": ["-c", "model_reasoning_effort=high"],
}
CODEX_BYPASS = {**CODEX, "sandbox": "bypass", "bin": "codex"}
CUSTOM = {
    **RUN,
    "kind": "custom",
    "bin": "/usr/bin/my-agent",
    "format": "text",
    "stdin": True,
    "message_file": "/r/runs/j1/nudge-1.md",
    "argv": [
        "/usr/bin/my-agent",
        "--prompt={prompt_file}",
        "--cwd",
        "{workdir}",
        "--out={run_dir}/o",
        "--session={session_id}",
        "{job_id}",
        "$(rm -rf /)",
        "{unknown}",
        "{prompt_file}{prompt_file}",
    ],
    "args": ["--extra", "{workdir}"],  # extra args are never templated
}
# no job_id, args null, the turn's message the prompt file
CUSTOM_NOMSG = {
    **{k: v for k, v in CUSTOM.items() if k not in ("message_file", "job_id")},
    "args": None,
}
BOX = {
    "prefix": ["podman", "exec", "-i", "hopper-j1"],
    "mounts": [["/home/u/app", "/work"], ["/r/runs/j1", "/run/hopper"]],
}
# the CLI's own folder is mounted: its path translates to itself, so it goes by name
BOXBIN = {
    "prefix": ["wrap"],
    "mounts": [["/opt/agents", "/opt/agents"], ["/r/runs/j1", "/run/hopper"]],
}

HEAD = "-p --output-format stream-json --verbose --include-partial-messages"
BYPASS = "--permission-mode bypassPermissions"
C_EXTRA = "--max-turns 3 --append-system-prompt 'be brief'"
X_HEAD = "exec --json --skip-git-repo-check"
X_WS = "-s workspace-write -m gpt-5 -c model_reasoning_effort=high"
X_BYPASS = "--dangerously-bypass-approvals-and-sandbox"
NUDGE = "/r/runs/j1/nudge-1.md"
BODY = "/r/runs/j1/prompt.body.md"
MINE = "--out=/r/runs/j1/o"
TAIL = f"'$(rm -rf /)' '{{unknown}}' /run/hopper/nudge-1.md{NUDGE} --extra '{{workdir}}'"

Case = tuple[str, dict[str, Any], str | None, bool, str]
CASES: list[Case] = [
    ("claude-new-nosession", CLAUDE, None, False, f"{C330} {HEAD} {BYPASS}"),
    ("claude-resume-nosession", CLAUDE, None, True, f"{C330} {HEAD} {BYPASS}"),
    ("claude-new", CLAUDE, "u-1", False, f"{C330} {HEAD} {BYPASS} --session-id u-1"),
    ("claude-resume", CLAUDE, "u-1", True, f"{C330} {HEAD} {BYPASS} --resume u-1"),
    ("claude_min-new-nosession", CLAUDE_MIN, None, False, f"claude {HEAD}"),
    ("claude_min-resume-nosession", CLAUDE_MIN, None, True, f"claude {HEAD}"),
    ("claude_min-new", CLAUDE_MIN, "u-1", False, f"claude {HEAD} --session-id u-1"),
    ("claude_min-resume", CLAUDE_MIN, "u-1", True, f"claude {HEAD} --resume u-1"),
    (
        "claude_full-new-nosession",
        CLAUDE_FULL,
        None,
        False,
        f"{C197} {HEAD} {BYPASS} --model opus {C_EXTRA}",
    ),
    (
        "claude_full-resume-nosession",
        CLAUDE_FULL,
        None,
        True,
        f"{C197} {HEAD} {BYPASS} --model opus {C_EXTRA}",
    ),
    (
        "claude_full-new",
        CLAUDE_FULL,
        "u-1",
        False,
        f"{C197} {HEAD} {BYPASS} --model opus --session-id u-1 {C_EXTRA}",
    ),
    (
        "claude_full-resume",
        CLAUDE_FULL,
        "u-1",
        True,
        f"{C197} {HEAD} {BYPASS} --model opus --resume u-1 {C_EXTRA}",
    ),
    ("codex-new-nosession", CODEX, None, False, f"{CODEX_BIN} {X_HEAD} -"),
    ("codex-resume-nosession", CODEX, None, True, f"{CODEX_BIN} {X_HEAD} -"),
    ("codex-new", CODEX, "t-1", False, f"{CODEX_BIN} {X_HEAD} -"),
    ("codex-resume", CODEX, "t-1", True, f"{CODEX_BIN} {X_HEAD} resume t-1 -"),
    ("codex_ws-new-nosession", CODEX_WS, None, False, f"{CODEX_BIN} {X_HEAD} {X_WS} -"),
    ("codex_ws-resume-nosession", CODEX_WS, None, True, f"{CODEX_BIN} {X_HEAD} {X_WS} -"),
    ("codex_ws-new", CODEX_WS, "t-1", False, f"{CODEX_BIN} {X_HEAD} {X_WS} -"),
    ("codex_ws-resume", CODEX_WS, "t-1", True, f"{CODEX_BIN} {X_HEAD} {X_WS} resume t-1 -"),
    ("codex_bypass-new-nosession", CODEX_BYPASS, None, False, f"codex {X_HEAD} {X_BYPASS} -"),
    ("codex_bypass-resume-nosession", CODEX_BYPASS, None, True, f"codex {X_HEAD} {X_BYPASS} -"),
    ("codex_bypass-new", CODEX_BYPASS, "t-1", False, f"codex {X_HEAD} {X_BYPASS} -"),
    ("codex_bypass-resume", CODEX_BYPASS, "t-1", True, f"codex {X_HEAD} {X_BYPASS} resume t-1 -"),
    (
        "custom-new-nosession",
        CUSTOM,
        None,
        False,
        f"/usr/bin/my-agent --prompt={NUDGE} --cwd /home/u/app {MINE} --session= j1 "
        f"'$(rm -rf /)' '{{unknown}}' {NUDGE}{NUDGE} --extra '{{workdir}}'",
    ),
    (
        "custom-resume",
        CUSTOM,
        "s-1",
        True,
        f"/usr/bin/my-agent --prompt={NUDGE} --cwd /home/u/app {MINE} --session=s-1 j1 "
        f"'$(rm -rf /)' '{{unknown}}' {NUDGE}{NUDGE} --extra '{{workdir}}'",
    ),
    (
        "custom_nomsg-new-nosession",
        CUSTOM_NOMSG,
        None,
        False,
        f"/usr/bin/my-agent --prompt={BODY} --cwd /home/u/app {MINE} --session= '' "
        f"'$(rm -rf /)' '{{unknown}}' {BODY}{BODY}",
    ),
    (
        "custom_nomsg-resume",
        CUSTOM_NOMSG,
        "s-1",
        True,
        f"/usr/bin/my-agent --prompt={BODY} --cwd /home/u/app {MINE} --session=s-1 '' "
        f"'$(rm -rf /)' '{{unknown}}' {BODY}{BODY}",
    ),
    (
        "claude-box-resume",
        {**CLAUDE_FULL, "container": BOX},
        "u-2",
        True,
        f"podman exec -i hopper-j1 claude {HEAD} {BYPASS} --model opus --resume u-2 {C_EXTRA}",
    ),
    (
        "claude-box-new",
        {**CLAUDE_FULL, "container": BOX},
        "u-2",
        False,
        f"podman exec -i hopper-j1 claude {HEAD} {BYPASS} --model opus --session-id u-2 {C_EXTRA}",
    ),
    (
        "claude-boxbin-resume",
        {**CLAUDE_FULL, "container": BOXBIN},
        "u-2",
        True,
        f"wrap claude {HEAD} {BYPASS} --model opus --resume u-2 {C_EXTRA}",
    ),
    (
        "claude-boxbin-new",
        {**CLAUDE_FULL, "container": BOXBIN},
        "u-2",
        False,
        f"wrap claude {HEAD} {BYPASS} --model opus --session-id u-2 {C_EXTRA}",
    ),
    (
        "codex-box-resume",
        {**CODEX_WS, "container": BOX},
        "u-2",
        True,
        f"podman exec -i hopper-j1 codex {X_HEAD} {X_WS} resume u-2 -",
    ),
    (
        "codex-box-new",
        {**CODEX_WS, "container": BOX},
        "u-2",
        False,
        f"podman exec -i hopper-j1 codex {X_HEAD} {X_WS} -",
    ),
    (
        "codex-boxbin-resume",
        {**CODEX_WS, "container": BOXBIN},
        "u-2",
        True,
        f"wrap codex {X_HEAD} {X_WS} resume u-2 -",
    ),
    (
        "codex-boxbin-new",
        {**CODEX_WS, "container": BOXBIN},
        "u-2",
        False,
        f"wrap codex {X_HEAD} {X_WS} -",
    ),
    (
        "custom-box-resume",
        {**CUSTOM, "container": BOX},
        "u-2",
        True,
        f"podman exec -i hopper-j1 my-agent --prompt={NUDGE} --cwd /work {MINE} --session=u-2 j1 "
        + TAIL,
    ),
    (
        "custom-box-new",
        {**CUSTOM, "container": BOX},
        "u-2",
        False,
        f"podman exec -i hopper-j1 my-agent --prompt={NUDGE} --cwd /work {MINE} --session=u-2 j1 "
        + TAIL,
    ),
    (
        "custom-boxbin-resume",
        {**CUSTOM, "container": BOXBIN},
        "u-2",
        True,
        f"wrap my-agent --prompt={NUDGE} --cwd /home/u/app {MINE} --session=u-2 j1 " + TAIL,
    ),
    (
        "custom-boxbin-new",
        {**CUSTOM, "container": BOXBIN},
        "u-2",
        False,
        f"wrap my-agent --prompt={NUDGE} --cwd /home/u/app {MINE} --session=u-2 j1 " + TAIL,
    ),
]


@pytest.mark.parametrize(
    ("spec", "session_id", "resume", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_the_argv_of_every_turn_is_unchanged(
    spec: dict[str, Any], session_id: str | None, resume: bool, expected: str
) -> None:
    message = Path(spec.get("message_file") or spec["prompt_file"])
    assert turn_argv(spec, message, session_id, resume) == shlex.split(expected)


CONFIG = {
    "claude": {
        "bin": "~/bin/claude",
        "permission_mode": "acceptEdits",
        "model": "opus",
        "args": ["--tag", "${job.id}"],
        "env": {"A": "1"},
        "idle_timeout": 60,
    },
    "codex": {
        "bin": "/opt/codex",
        "sandbox": "workspace-write",
        "api_retries": 4,
        "on_error": "pause",
    },
    "mine": {
        "argv": ["my-agent", "--in={prompt_file}", "--id=${job.id}"],
        "format": "claude-jsonl",
        "stdin": False,
        "on_dead": "resume",
    },
}
SESSION_FRONT = (
    'session = "s1"\ncheck = ["make", "${job.id}"]\nmax_nudges = 3\n'
    'idle_timeout = "2m"\non_idle = "nudge"\n'
)
OWN: dict[str, dict[str, Any]] = {
    "claude": {"bin": "<home>/bin/claude", "permission_mode": "acceptEdits"},
    "codex": {"bin": "/opt/codex", "sandbox": "workspace-write"},
    "mine": {
        "bin": "my-agent",
        "argv": ["my-agent", "--in={prompt_file}", "--id=j1"],
        "format": "claude-jsonl",
        "stdin": False,
    },
}


def expected_spec(agent: str, session: bool) -> dict[str, Any]:
    """agent.spec.json as hopper wrote it at 7ca2156, keys in its order."""
    claude, codex = agent == "claude", agent == "codex"
    spec: dict[str, Any] = {
        "kind": agent if claude or codex else "custom",
        "agent_name": agent,
        "job_id": "j1",
        "run_dir": "<root>/runs/j1",
        "workdir": "<root>/work",
        "prompt_file": "<root>/runs/j1/prompt.body.md",
        "args": ["--tag", "j1"] if claude else [],
        "model": "opus" if claude else None,
        "session": None,
        "sessions_dir": "<root>/sessions",
        "check": None,
        "max_nudges": 2,
        "idle_timeout": 60.0 if claude else None,
        "on_idle": "abort",
        "on_error": "pause" if codex else "retry",
        "on_dead": "resume" if agent == "mine" else "fail",
        "api_retries": 4 if codex else 2,
        "retry_backoff": 2.0,
        "grace": 5.0,
        **OWN[agent],
    }
    if session:
        spec.update(
            session="s1", check=["make", "j1"], max_nudges=3, idle_timeout=120.0, on_idle="nudge"
        )
    return spec


@pytest.mark.parametrize("session", [False, True])
@pytest.mark.parametrize("agent", ["claude", "codex", "mine"])
def test_each_adapter_writes_the_same_driver_spec(
    agent: str, session: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    agents = builtin_agents(Config.model_validate({"agents": CONFIG}))
    run_dir = tmp_path / "runs" / "j1"
    run_dir.mkdir(parents=True)
    text = (f"+++\n{SESSION_FRONT}+++\n" if session else "") + "  do the thing  \n"
    job = JobContext(
        "j1", "thing", run_dir, tmp_path / "work", prompts.parse(text.encode()), {"job.id": "j1"}
    )
    prep = agents[agent].prepare(job)
    assert prep.argv[1:] == ["-I", "-m", "hopper.agents.drive", str(run_dir / SPEC_FILE)]
    assert prep.env == ({"A": "1"} if agent == "claude" else {})
    assert prep.stop_signals == [2, 15]
    assert prep.idle_timeout is None
    assert prep.files["prompt.body.md"] == "do the thing\n"
    written = prep.files[SPEC_FILE]
    written = written.replace(str(tmp_path / "home"), "<home>").replace(str(tmp_path), "<root>")
    assert written == json.dumps(expected_spec(agent, session), indent=2) + "\n"


def test_the_driver_loads_no_pydantic() -> None:
    """The driver starts for every agent job: the CLIs it imports are standard library."""
    code = "import sys, hopper.agents.drive; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert {"hopper.agents.claude", "hopper.agents.codex", "hopper.agents.custom"} <= set(out)
    assert not [m for m in out if m == "pydantic" or m.startswith(("pydantic.", "hopper.config"))]


def test_claude_gets_a_fresh_conversation_id_for_every_turn_that_starts_one() -> None:
    first, second = (
        claude.CLAUDE.session_for_turn(None, False),
        claude.CLAUDE.session_for_turn("u-1", False),
    )
    assert first and second and first != second != "u-1"
    assert str(uuid.UUID(first)) == first
    assert claude.CLAUDE.session_for_turn("u-1", True) == "u-1"


@pytest.mark.parametrize("cli", [codex.CODEX, custom.CUSTOM])
def test_codex_and_custom_agents_keep_the_known_session(cli: Any) -> None:
    assert cli.session_for_turn("t-1", False) == cli.session_for_turn("t-1", True) == "t-1"
    assert cli.session_for_turn(None, False) is None


@pytest.mark.parametrize(
    ("spec", "dialect"),
    [
        ({"kind": "claude", "format": "codex-jsonl"}, "claude"),
        ({"kind": "codex"}, "codex"),
        ({"kind": "custom", "format": "claude-jsonl"}, "claude"),
        ({"kind": "custom", "format": "codex-jsonl"}, "codex"),
        ({"kind": "custom", "format": "text"}, "text"),
    ],
)
def test_each_cli_names_its_stream_dialect(spec: dict[str, Any], dialect: str) -> None:
    assert cli_for(spec).dialect(spec) == dialect
    assert (dialect in DIALECTS) == (dialect != "text")


def test_the_clis_are_found_by_their_spec_kind() -> None:
    assert CLIS == {"claude": claude.CLAUDE, "codex": codex.CODEX, "custom": custom.CUSTOM}


@pytest.mark.parametrize("kind", ["gemini", None, 3])
def test_an_unknown_kind_names_the_spec_and_what_to_do(kind: object) -> None:
    with pytest.raises(UnknownKind) as caught:
        cli_for({"kind": kind, "run_dir": "/r/runs/j1"})
    text = str(caught.value)
    assert "agent.spec.json in /r/runs/j1" in text and repr(kind) in text
    assert "claude, codex, custom" in text and "hopper retry" in text
