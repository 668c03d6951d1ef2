"""Agent-only keys on a bash job are refused at the claim, never silently ignored.

``check``, ``max_nudges`` and ``on_idle = "nudge"`` drive nudges of an agent
session; a bash script cannot be nudged. The job fails ``bad_prompt`` before
it runs, with the fix (end the script with the check) in its detail.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import drop
from hopper.core.prompt import BadPrompt, parse, refuse_agent_only_keys
from hopper.store.layout import Layout


@pytest.mark.parametrize(
    "front", ['check = ["false"]', "max_nudges = 1", 'on_idle = "nudge"\nidle_timeout = "5s"']
)
def test_agent_only_keys_are_refused_for_bash(
    layout: Layout, hopper, tmp_path: Path, front: str
) -> None:
    ran = tmp_path / "ran"
    drop(layout, "checked", f'+++\nagent = "bash"\n{front}\n+++\ntouch {ran}\n')
    assert hopper("run", "--until-idle").returncode == 0
    (run_dir,) = layout.runs.iterdir()
    record = json.loads((run_dir / "job.json").read_text())
    assert (record["state"], record["reason"]) == ("failed", "bad_prompt")
    key = front.split(" ")[0]
    assert f"key {key!r} is for agent jobs" in record["detail"]
    assert "end the script with the check instead" in record["detail"]
    assert record["started_at"] is None and not ran.exists()


def test_same_keys_are_fine_for_agents_and_abort_is_fine_for_bash() -> None:
    spec = parse(b'+++\non_idle = "abort"\nidle_timeout = "5s"\n+++\necho hi\n')
    refuse_agent_only_keys(spec.options)  # nothing to refuse
    with pytest.raises(BadPrompt, match="'check'"):
        refuse_agent_only_keys(parse(b'+++\ncheck = ["pytest"]\n+++\nx\n').options)
