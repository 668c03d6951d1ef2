"""Front matter ``env = { … }``: it reaches the job, and its values stay out of hopper's files.

Order of precedence (last wins): the watcher's environment, the config's
``[env]``, the agent's ``[agents.X.env]``, the prompt's ``env``, then hopper's
own ``HOPPER_*`` variables (a prompt may not set those).
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from conftest import FAST_CONFIG, drop
from hopper.core.prompt import ENV_MAX_BYTES, MAX_ENV, BadPrompt, parse
from hopper.store.admission import ADMISSION_FILE, ADMISSION_MODE
from hopper.store.layout import Layout

SECRET = "s3cr3t-Value-7f0e9d"


def files_holding(root: Path, needle: str) -> list[Path]:
    """Every file under ``root`` that contains ``needle``, except the prompt's own copies
    and a run's admission.json, which must be private to hopper's user (mode 0600)."""
    hits = []
    for path in root.rglob("*"):
        prompt = path.name.endswith((".prompt.md", "prompt.md"))
        if path.name == ADMISSION_FILE and path.parent.parent == root / "runs":
            assert stat.S_IMODE(path.lstat().st_mode) == ADMISSION_MODE == 0o600, path
            continue
        if path.is_file() and not prompt and needle.encode() in path.read_bytes():
            hits.append(path)
    return hits


def records(layout: Layout) -> list[dict[str, object]]:
    return [json.loads((d / "job.json").read_text()) for d in sorted(layout.runs.iterdir())]


def test_env_reaches_a_bash_job_and_never_hopper_files(
    layout: Layout, hopper, tmp_path: Path
) -> None:
    out = tmp_path / "seen"
    script = (
        f'printf \'%s|%s\' "$API_TOKEN" "$MODE" > {out}\n'
        'echo "token length ${#API_TOKEN}"\n'
        'echo "job $HOPPER_JOB_ID"\n'
    )
    text = f'+++\nagent = "bash"\nenv = {{ API_TOKEN = "{SECRET}", MODE = "fast" }}\n+++\n{script}'
    drop(layout, "with-env", text)
    result = hopper("run", "--until-idle")
    assert result.returncode == 0
    assert out.read_text() == f"{SECRET}|fast"
    (record,) = records(layout)
    assert record["state"] == "succeeded", record["detail"]
    log = (layout.run_dir(str(record["id"])) / "job.log").read_text()
    assert f"token length {len(SECRET)}" in log and f"job {record['id']}" in log
    assert (layout.run_dir(str(record["id"])) / ADMISSION_FILE).exists()  # checked 0600 below
    assert files_holding(layout.root, SECRET) == []
    assert SECRET not in result.stderr + result.stdout  # the watcher's own log


def test_prompt_env_wins_over_config_and_agent_env(
    layout: Layout, hopper, config_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "seen"
    show = json.dumps(["sh", "-c", f'printf "%s %s %s" "$MODE" "$LEVEL" "$OWN" >> {out}'])
    config_file.write_text(
        FAST_CONFIG
        + '[env]\nMODE = "config"\nLEVEL = "config"\n'
        + "[agents.show]\n"
        + f"argv = {show}\n"
        + '[agents.show.env]\nMODE = "agent"\nOWN = "agent"\n'
    )
    drop(layout, "a-plain", '+++\nagent = "show"\n+++\nhi\n')
    assert hopper("run", "--until-idle").returncode == 0
    assert out.read_text() == "agent config agent"
    out.unlink()
    drop(layout, "b-own", '+++\nagent = "show"\nenv = { MODE = "prompt" }\n+++\nhi\n')
    assert hopper("run", "--until-idle").returncode == 0
    assert out.read_text() == "prompt config agent"  # reaches an agent's process too
    assert all(r["state"] == "succeeded" for r in records(layout))


def test_a_prompt_cannot_set_hoppers_own_variables(layout: Layout, hopper) -> None:
    drop(layout, "sneaky", '+++\nagent = "bash"\nenv = { HOPPER_ROOT = "/" }\n+++\necho hi\n')
    assert hopper("run", "--until-idle").returncode == 0
    (record,) = records(layout)
    assert record["reason"] == "bad_prompt"
    assert "'HOPPER_ROOT': HOPPER_* variables are set by hopper itself" in str(record["detail"])


def bad_env(front: str) -> str:
    with pytest.raises(BadPrompt) as info:
        parse(f"+++\n{front}\n+++\nbody\n".encode())
    text = info.value.describe("inbox/x.prompt.md")
    assert SECRET not in text  # a bad value is never echoed: it may be a secret
    return text


def test_env_keys_must_be_variable_names() -> None:
    assert "'1ST' is not an environment variable name" in bad_env(f'env = {{ 1ST = "{SECRET}" }}')
    assert "'A-B' is not an environment" in bad_env(f'env = {{ "A-B" = "{SECRET}" }}')
    assert "x.prompt.md:2:" in bad_env(f'env = {{ "A B" = "{SECRET}" }}')


def test_env_values_must_be_strings_and_say_which_key() -> None:
    text = bad_env("env = { PORT = 8080 }")
    assert "key 'env': 'PORT': Input should be a valid string" in text
    assert 'env = { MODE = "fast" }' in text  # the hint


def test_env_value_with_nul_is_refused() -> None:
    assert "value of 'TOKEN' contains a NUL" in bad_env(f'env = {{ TOKEN = "{SECRET}\\u0000" }}')


def test_env_size_caps() -> None:
    many = ", ".join(f"K{i} = 'v'" for i in range(MAX_ENV + 1))
    assert f"sets {MAX_ENV + 1} variables; at most {MAX_ENV}" in bad_env(f"env = {{ {many} }}")
    big = "x" * ENV_MAX_BYTES
    assert f"over the limit of {ENV_MAX_BYTES} bytes" in bad_env(f'env = {{ BIG = "{big}" }}')


def test_env_must_be_a_table() -> None:
    assert "key 'env'" in bad_env(f'env = "{SECRET}"')
