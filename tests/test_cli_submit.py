"""``hopper submit`` you can trust (issue 29), through the command.

It checks the prompt with the watcher's own admission before writing (the
watcher's reason, exit 2, nothing in the inbox), warns when no watcher's
heartbeat under the root is fresh, prints the job's name, names the job and
its inbox file after a front-matter ``name`` however the prompt arrives, and
``--wait`` / ``--follow`` end with the job's outcome.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import Watchers, bash, hopper_cmd
from hopper.store.layout import Layout
from hopper.store.watchers import write_beat

NO_WATCHER = "no watcher serves this root"


def inbox_files(layout: Layout) -> list[str]:
    return sorted(str(p.relative_to(layout.inbox)) for p in layout.inbox.rglob("*") if p.is_file())


def refused(result: subprocess.CompletedProcess[str], layout: Layout) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert "nothing was submitted" in result.stderr
    assert inbox_files(layout) == [], "nothing written, not even a temporary"
    return result.stderr


def test_a_typod_key_is_refused_with_its_line_and_nothing_written(
    layout: Layout, hopper, tmp_path: Path
) -> None:
    prompt = tmp_path / "deploy.prompt.md"
    prompt.write_text('+++\nagent = "bash"\ntimout = "5m"\n+++\necho hi\n')
    err = refused(hopper("submit", str(prompt)), layout)
    assert (
        f"{prompt}:3: unknown key 'timout'; did you mean 'timeout'? (known keys: agent, name" in err
    )


def test_an_unknown_agent_is_refused(layout: Layout, hopper) -> None:
    err = refused(hopper("submit", "-", input='+++\nagent = "bsh"\n+++\necho hi\n'), layout)
    assert "stdin: unknown agent 'bsh'; available: bash, claude, codex" in err


def test_an_unknown_agent_given_as_an_option_is_refused(layout: Layout, hopper) -> None:
    err = refused(hopper("submit", "--agent", "bsh", input="echo hi\n"), layout)
    assert "stdin with the options given: unknown agent 'bsh'" in err


def test_bad_toml_is_refused(layout: Layout, hopper, tmp_path: Path) -> None:
    prompt = tmp_path / "x.prompt.md"
    prompt.write_text('+++\nagent = "bash\n+++\necho hi\n')
    err = refused(hopper("submit", str(prompt)), layout)
    assert f"{prompt}:2: front matter is not valid TOML" in err
    assert 'write keys as key = "value"' in err


def test_bad_toml_with_options_to_merge_is_refused_as_usage(layout: Layout, hopper) -> None:
    err = refused(hopper("submit", "--priority", "3", input='+++\nx = "\n+++\nhi\n'), layout)
    assert "stdin: cannot add the options given to this prompt" in err


def test_a_bad_option_value_is_refused(layout: Layout, hopper) -> None:
    err = refused(hopper("submit", "--timeout", "5x", input=bash("echo hi")), layout)
    assert "stdin with the options given: key 'timeout'" in err


def test_a_bash_job_with_nothing_to_run_is_refused(layout: Layout, hopper) -> None:
    err = refused(hopper("submit", input=bash("")), layout)
    assert "stdin: has no script to run (put the commands in the body)" in err


def test_a_route_default_agent_is_checked_for_its_folder(
    layout: Layout, hopper, config_file: Path
) -> None:
    config_file.write_text(config_file.read_text() + '[routes."ops"]\nagent = "nope"\n')
    err = refused(hopper("submit", "--to", "ops", input="echo hi\n"), layout)
    assert "unknown agent 'nope'" in err
    ok = hopper("submit", "--to", "dev", input="echo hi\n")
    assert ok.returncode == 0, ok.stderr


def test_a_prompt_over_max_prompt_bytes_is_refused(
    layout: Layout, hopper, config_file: Path
) -> None:
    config_file.write_text(config_file.read_text() + "max_prompt_bytes = 100\n")
    err = refused(hopper("submit", input="echo " + "x" * 200 + "\n"), layout)
    assert "stdin: is 206 bytes, over the limit of 100 bytes" in err
    assert "raise max_prompt_bytes in the config" in err


def test_prints_the_name_and_warns_when_no_watcher_serves(
    layout: Layout, hopper, tmp_path: Path
) -> None:
    prompt = tmp_path / "deploy.prompt.md"
    prompt.write_text(bash("echo hi"))
    result = hopper("submit", str(prompt))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "submitted deploy (inbox/deploy.prompt.md)\n"
    assert f"warning: {NO_WATCHER}: no heartbeat file" in result.stderr
    assert inbox_files(layout) == ["deploy.prompt.md"]


def test_no_warning_when_a_watcher_beats_here(layout: Layout, hopper) -> None:
    write_beat(layout, host="h", pid=os.getpid(), owner="", started=0.0, running=0, queued=0)
    result = hopper("submit", "--name", "quiet", input=bash("echo hi"))
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout == "submitted quiet (inbox/quiet.prompt.md)\n"


def test_a_stale_heartbeat_is_no_watcher(layout: Layout, hopper) -> None:
    beat = write_beat(layout, host="h", pid=1, owner="", started=0.0, running=0, queued=0)
    os.utime(beat, (1_000_000, 1_000_000))
    result = hopper("submit", input=bash("echo hi"))
    assert result.returncode == 0
    assert f"warning: {NO_WATCHER}: no heartbeat file is fresh" in result.stderr


def test_json_prints_name_and_path(layout: Layout, hopper) -> None:
    result = hopper("submit", "--json", "--name", "j", "--to", "team", input=bash("echo hi"))
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out == {
        "name": "j",
        "path": str(layout.inbox / "team" / "j.prompt.md"),
        "inbox_path": "inbox/team/j.prompt.md",
    }


def test_a_front_matter_name_names_a_prompt_from_stdin(layout: Layout, hopper) -> None:
    result = hopper("submit", "-", input=bash("echo hi", name="nightly"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "submitted nightly (inbox/nightly.prompt.md)\n"
    assert inbox_files(layout) == ["nightly.prompt.md"]


def test_a_front_matter_name_names_a_prompt_file(layout: Layout, hopper, tmp_path: Path) -> None:
    prompt = tmp_path / "draft.md"
    prompt.write_text(bash("echo hi", name="release"))
    assert hopper("submit", str(prompt)).stdout.startswith("submitted release ")
    assert inbox_files(layout) == ["release.prompt.md"]


def test_name_option_wins_over_the_front_matter(layout: Layout, hopper) -> None:
    result = hopper("submit", "--name", "mine", input=bash("echo hi", name="theirs"))
    assert result.stdout == "submitted mine (inbox/mine.prompt.md)\n"
    assert 'name = "mine"' in (layout.inbox / "mine.prompt.md").read_text()


def test_a_taken_file_name_prints_the_name_the_job_gets(layout: Layout, hopper) -> None:
    (layout.inbox / "dup.prompt.md").write_text(bash("echo first"))
    result = hopper("submit", "--json", input=bash("echo hi", name="dup"))
    out = json.loads(result.stdout)
    assert out["name"] == "dup" and out["inbox_path"] != "inbox/dup.prompt.md"
    without = hopper("submit", "--json", "--to", "", input=bash("echo hi"))
    stem = json.loads(without.stdout)["name"]
    assert json.loads(without.stdout)["inbox_path"] == f"inbox/{stem}.prompt.md"


def test_wait_timeout_without_wait_is_a_usage_error(layout: Layout, hopper) -> None:
    result = hopper("submit", "--wait-timeout", "3", input=bash("echo hi"))
    assert result.returncode == 2 and "--wait-timeout goes with --wait or --follow" in result.stderr
    assert inbox_files(layout) == []


def test_wait_times_out_with_no_watcher(layout: Layout, hopper) -> None:
    result = hopper("submit", "--wait", "--wait-timeout", "1", input=bash("echo hi"))
    assert result.returncode == 3, result.stderr
    assert "timed out waiting for a watcher to claim it" in result.stderr


def submit(
    layout: Layout, config_file: Path, *args: str, input: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        hopper_cmd("submit", "--root", str(layout.root), "--config", str(config_file), *args),
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(("script", "code"), [("echo done", 0), ("exit 4", 1)])
def test_wait_exits_with_the_jobs_outcome(
    layout: Layout, watchers: Watchers, config_file: Path, script: str, code: int
) -> None:
    watchers.start()
    # An older job of the same name must not be taken for this one.
    old = submit(
        layout, config_file, "--wait", "--wait-timeout", "90", input=bash("exit 9", name="w")
    )
    assert old.returncode == 1, old.stderr
    result = submit(
        layout, config_file, "--wait", "--wait-timeout", "90", input=bash(script, name="w")
    )
    assert result.returncode == code, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("submitted w (inbox/w")
    assert ("succeeded" if code == 0 else "failed") in lines[1]
    assert NO_WATCHER not in result.stderr


def test_follow_prints_the_output_and_exits_with_the_outcome(
    layout: Layout, watchers: Watchers, config_file: Path
) -> None:
    watchers.start()
    result = submit(
        layout, config_file, "--follow", input=bash("echo line-one; echo line-two; exit 3")
    )
    assert result.returncode == 1, result.stderr
    assert "line-one\nline-two\n" in result.stdout
    assert "failed" in result.stderr
