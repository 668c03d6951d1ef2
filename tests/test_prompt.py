"""core/prompt.py: parse, decode and bash_script, pure (no files, no processes)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hopper.core import frontmatter
from hopper.core.prompt import BadPrompt, PromptOptions, PromptSpec, bash_script, decode, parse


def bad(data: bytes) -> BadPrompt:
    with pytest.raises(BadPrompt) as info:
        parse(data)
    return info.value


# -- happy paths -----------------------------------------------------------------


def test_no_front_matter_is_all_body() -> None:
    spec = parse(b"Fix the tests.\n")
    assert spec.options == PromptOptions()
    assert spec.body == "Fix the tests.\n"
    assert spec.body_line == 1
    assert not spec.has_front_matter
    assert spec.timeout_seconds is None


def test_front_matter() -> None:
    spec = parse(
        b'+++\nagent = "bash"\nname = "fix-tests"\nworkdir = "~/src"\n'
        b'timeout = "1h30m"\nenv = { A = "1" }\n+++\necho hi\n'
    )
    assert spec.has_front_matter
    opts = spec.options
    assert (opts.agent, opts.name, opts.workdir) == ("bash", "fix-tests", "~/src")
    assert opts.env == {"A": "1"}
    assert spec.timeout_seconds == 5400.0
    assert spec.body == "echo hi\n"
    assert spec.body_line == 8


def test_numeric_timeout_is_seconds() -> None:
    assert parse(b"+++\ntimeout = 90\n+++\nx").timeout_seconds == 90.0
    assert parse(b"+++\ntimeout = 0.5\n+++\nx").timeout_seconds == 0.5


def test_empty_front_matter() -> None:
    spec = parse(b"+++\n+++\nbody")
    assert spec.has_front_matter and spec.options == PromptOptions() and spec.body == "body"


def test_crlf_is_normalised() -> None:
    spec = parse(b'+++\r\nagent = "bash"\r\n+++\r\necho a\r\necho b\r\n')
    assert spec.options.agent == "bash"
    assert spec.body == "echo a\necho b\n"
    assert "\r" not in spec.body


def test_bom_is_stripped() -> None:
    spec = parse(b'\xef\xbb\xbf+++\nagent = "bash"\n+++\necho ok\n')
    assert spec.has_front_matter and spec.options.agent == "bash"
    assert decode(b"\xef\xbb\xbfhi") == "hi"


def test_lone_cr_is_normalised() -> None:
    assert decode(b"a\rb") == "a\nb"


def test_fence_with_trailing_spaces_counts() -> None:
    assert parse(b'+++  \nagent = "bash"\n+++\t\nx').options.agent == "bash"


def test_plus_lines_after_front_matter_stay_in_the_body() -> None:
    """Front matter injection: a later +++ block is body text, not options."""
    spec = parse(b'+++\nagent = "bash"\n+++\necho a\n+++\nagent = "evil"\n+++\n')
    assert spec.options.agent == "bash"
    assert 'agent = "evil"' in spec.body


def test_plus_fence_not_on_first_line_is_body() -> None:
    spec = parse(b'\n+++\nagent = "x"\n+++\n')
    assert not spec.has_front_matter and spec.options.agent is None


# -- structural errors -----------------------------------------------------------


def test_unclosed_front_matter() -> None:
    err = bad(b'+++\nagent = "bash"\necho hi\n')
    assert err.line == 1
    assert "never closed" in err.message and "+++" in err.hint


def test_yaml_front_matter() -> None:
    err = bad(b"---\nagent: bash\n---\nhi\n")
    assert err.line == 1 and "YAML" in err.message and "TOML" in err.hint


@pytest.mark.parametrize("data", [b"", b"   ", b"\n\n\t \n", b"\xef\xbb\xbf", b"\r\n"])
def test_empty_and_whitespace(data: bytes) -> None:
    assert "empty" in bad(data).message


def test_nul_bytes() -> None:
    err = bad(b"hello\x00world")
    assert "NUL" in err.message and "UTF-8" in err.hint


def test_png_is_binary() -> None:
    assert "NUL" in bad(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR").message


def test_invalid_utf8_names_the_line() -> None:
    err = bad(b"line one\nline two\nbad \xff here\n")
    assert err.line == 3
    assert "UTF-8" in err.message
    assert err.describe("inbox/x.prompt.md").startswith("inbox/x.prompt.md:3: ")


# -- TOML errors name the line of the FILE (the opening +++ is line 1) -------------


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (b'+++\nagent = "bash"\nbad line here\nname = "x"\n+++\nx', 3),
        (b'+++\nagent = "bash"\nname = "x"\ntimeout = \n+++\nx', 4),
        (b'+++\nagent = "bash"\ntimeout = "unterminated\n+++\nx', 3),
        (b'+++\nagent = "bash"\n\n\n[env\n+++\nx', 5),
        (b"+++\n= 1\n+++\nx", 2),
    ],
    ids=["garbage-line", "missing-value-last-line", "unterminated-string", "bad-table", "no-key"],
)
def test_malformed_toml_names_file_line(data: bytes, line: int) -> None:
    err = bad(data)
    assert "not valid TOML" in err.message
    assert err.line == line
    assert err.describe("f").startswith(f"f:{line}: ")
    assert f"at line {line}" in err.message


def test_toml_open_at_end_of_front_matter_points_at_closing_fence() -> None:
    err = bad(b'+++\nagent = "bash"\nafter = [1,\n+++\nx')
    assert err.line == 4
    assert "closing +++" in err.message


def test_duplicate_key_names_the_second_line() -> None:
    err = bad(b'+++\nagent = "bash"\nagent = "claude"\n+++\nx')
    assert err.line == 3
    assert "not valid TOML" in err.message


def test_unknown_key_lists_known_keys() -> None:
    err = bad(b'+++\nagent = "bash"\nmodle = "x"\n+++\nx')
    assert err.line == 3
    assert "'modle'" in err.message
    for key in PromptOptions.model_fields:
        assert key in err.hint


@pytest.mark.parametrize(
    ("front", "key"),
    [
        ("timeout = true", "timeout"),
        ("agent = 3", "agent"),
        ('env = "x"', "env"),
        ("env = { A = 1 }", "env"),
        ("name = 12", "name"),
        ("workdir = false", "workdir"),
        ('agent = ["bash"]', "agent"),
    ],
)
def test_wrong_types_are_strict(front: str, key: str) -> None:
    err = bad(f"+++\n{front}\n+++\nx".encode())
    assert err.line == 2
    assert f"'{key}'" in err.message


@pytest.mark.parametrize(
    ("front", "fragment"),
    [
        ("timeout = true", "45m"),
        ("env = { A = 1 }", "table of strings"),
        ("agent = 3", "agent = "),
        ("workdir = 1", "absolute path"),
    ],
)
def test_type_errors_say_what_to_write(front: str, fragment: str) -> None:
    assert fragment in bad(f"+++\n{front}\n+++\nx".encode()).hint


@pytest.mark.parametrize("key", ["agent", "workdir"])
def test_empty_agent_or_workdir_is_refused_not_defaulted(key: str) -> None:
    err = bad(f'+++\n{key} = ""\n+++\nx'.encode())
    assert f"'{key}'" in err.message and err.line == 2


@pytest.mark.parametrize("value", ['"soon"', '"-5s"', '"5 parsecs"', '""', "-1", '"1h-"', '"m"'])
def test_bad_durations(value: str) -> None:
    err = bad(f"+++\ntimeout = {value}\n+++\nx".encode())
    assert "'timeout'" in err.message and err.line == 2


@pytest.mark.parametrize(
    "name", ["a/b", "../etc", ".hidden", "-dash", "", "x" * 101, "sp ace", "nl\nx", "ünï"]
)
def test_bad_names(name: str) -> None:
    err = bad(f"+++\nname = {frontmatter._value(name)}\n+++\nx".encode())
    assert "'name'" in err.message and err.line == 2


@pytest.mark.parametrize("name", ["a", "fix-tests", "v1.2_final", "0" * 100])
def test_good_names(name: str) -> None:
    assert parse(f'+++\nname = "{name}"\n+++\nx'.encode()).options.name == name


# -- bash_script -------------------------------------------------------------------


def spec_of(body: str) -> PromptSpec:
    return parse(b'+++\nagent = "bash"\n+++\n' + body.encode())


def test_bash_script_is_whole_body_without_fence() -> None:
    assert bash_script(spec_of("echo a\necho b\n")) == "echo a\necho b\n"


def test_first_bash_block_is_chosen() -> None:
    body = "prose\n```python\nprint(1)\n```\n```bash\necho one\n```\n```bash\necho two\n```\n"
    assert bash_script(spec_of(body)) == "echo one\n"


def test_sh_block_counts() -> None:
    assert bash_script(spec_of("text\n```sh\necho sh\n```\n")) == "echo sh\n"


def test_sh_block_before_bash_block_wins() -> None:
    body = "```sh\necho first\n```\n```bash\necho second\n```\n"
    assert bash_script(spec_of(body)) == "echo first\n"


@pytest.mark.parametrize("body", ["\n\n", "```bash\n```\n", "```bash\n   \n```\n"])
def test_empty_script(body: str) -> None:
    with pytest.raises(BadPrompt) as info:
        bash_script(spec_of(body))
    assert "no script" in info.value.message


# -- describe ------------------------------------------------------------------------


def test_describe_shapes() -> None:
    assert BadPrompt("is empty").describe("f") == "f: is empty"
    assert BadPrompt("oops", line=4, hint="fix it").describe("f") == "f:4: oops (fix it)"


# -- properties ----------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048))
def test_parse_never_raises_anything_but_bad_prompt(data: bytes) -> None:
    try:
        spec = parse(data)
    except BadPrompt as exc:
        text = exc.describe("f")
        assert text.startswith("f")
        assert text.strip()
        assert "\n" not in text and "\r" not in text
    else:
        assert isinstance(spec, PromptSpec)


fm_text = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\x00"),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        st.characters(codec="utf-8", exclude_categories=("Cs",)),
        max_size=200,
    ).map(lambda s: "+++\n" + s)
)
def test_parse_text_with_fence_never_escapes(text: str) -> None:
    try:
        parse(text.encode())
    except BadPrompt as exc:
        line = exc.describe("inbox/f.prompt.md")
        assert line.startswith("inbox/f.prompt.md") and "\n" not in line


name_st = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,30}\Z")
# env keys must be variable names, and HOPPER_* are hopper's (test_env.py has the refusals)
env_name_st = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,30}\Z").filter(
    lambda k: not k.upper().startswith("HOPPER_")
)
duration_st = st.one_of(
    st.integers(min_value=1, max_value=10**6),  # 0 is refused: a limit of 0 s fires at once
    st.floats(min_value=0.001, max_value=1e6, allow_nan=False, allow_infinity=False),
    st.from_regex(r"\A[1-9][0-9]{0,2}(ms|s|m|h|d)\Z"),  # at most ten years
)


@settings(max_examples=300, deadline=None)
@given(
    agent=st.none() | fm_text.filter(bool),
    name=st.none() | name_st,
    workdir=st.none() | fm_text.filter(bool),
    timeout=st.none() | duration_st,
    env=st.dictionaries(env_name_st, fm_text, max_size=4),
    body=fm_text,
)
def test_render_then_parse_round_trips(
    agent: str | None,
    name: str | None,
    workdir: str | None,
    timeout: int | float | str | None,
    env: dict[str, str],
    body: str,
) -> None:
    options: dict[str, frontmatter.Value] = {}
    for key, value in (
        ("agent", agent),
        ("name", name),
        ("workdir", workdir),
        ("timeout", timeout),
    ):
        if value is not None:
            options[key] = value
    if env:
        options["env"] = env
    rendered = frontmatter.render(options)
    spec = parse((rendered + "x" + body).encode())
    assert spec.options == PromptOptions(**options)  # type: ignore[arg-type]
    assert spec.has_front_matter == bool(options)


# -- hostile front matter: depth, list caps, numbers (issue 13) ----------------------------


def _fm(body: str) -> bytes:
    return f"+++\n{body}\n+++\necho\n".encode()


@pytest.mark.parametrize(
    "front",
    [
        "after = " + "[" * 1000 + "]" * 1000,
        "env = " + "{ a = " * 1000 + '"x"' + " }" * 1000,
    ],
    ids=["arrays-1000-deep", "inline-tables-1000-deep"],
)
def test_front_matter_nested_1000_deep_is_a_bad_prompt(front: str) -> None:
    """tomllib recurses once per level: the RecursionError is a reason, not a crash."""
    with pytest.raises(BadPrompt) as err:
        parse(_fm(front))
    assert "nested too deeply" in err.value.message
    assert err.value.line == 2
    assert "lists of strings" in err.value.hint


def test_front_matter_nested_past_the_cap_names_the_depth() -> None:
    with pytest.raises(BadPrompt, match="nested 9 levels deep"):
        parse(_fm("after = " + "[" * 20 + "]" * 20))


def test_after_is_capped() -> None:
    names = ", ".join(f'"job-{i}"' for i in range(101))
    with pytest.raises(BadPrompt) as err:
        parse(_fm(f'agent = "bash"\nafter = [{names}]'))
    assert "key 'after'" in err.value.message and "at most 100" in err.value.message
    assert err.value.line == 3
    ok = ", ".join(f'"job-{i}"' for i in range(100))
    assert len(parse(_fm(f"after = [{ok}]")).options.after) == 100


@pytest.mark.parametrize(
    ("key", "front"),
    [
        ("check", "check = [" + ", ".join('"a"' for _ in range(257)) + "]"),
        ("on_success", "on_success = [" + ", ".join('"a"' for _ in range(257)) + "]"),
        ("env", "env = { " + ", ".join(f'K{i} = "v"' for i in range(257)) + " }"),
    ],
)
def test_argv_and_env_are_capped(key: str, front: str) -> None:
    with pytest.raises(BadPrompt) as err:
        parse(_fm(front))
    assert f"key {key!r}" in err.value.message and "at most 256" in err.value.message


@pytest.mark.parametrize(
    ("front", "fragment"),
    [
        ("timeout = nan", "not a finite duration"),
        ("timeout = inf", "not a finite duration"),
        ("timeout = -inf", "not a finite duration"),
        ('timeout = "inf"', "not a finite duration"),
        ('timeout = "NaN"', "not a finite duration"),
        ("timeout = -5", "negative"),
        ('timeout = "-5s"', "not a duration"),
        ("timeout = 0", "not more than 0"),
        ('timeout = "0s"', "not more than 0"),
        ("timeout = 1e300", "longer than ten years"),
        ("idle_timeout = nan", "not a finite duration"),
        ("idle_timeout = 0", "not more than 0"),
        ('memory_max = "' + "9" * 400 + '"', "more than 1 EiB"),
        ('output_max = "99999999T"', "more than 1 EiB"),
    ],
)
def test_numbers_must_be_finite_and_positive(front: str, fragment: str) -> None:
    key = front.split(" ")[0]
    with pytest.raises(BadPrompt) as err:
        parse(_fm(front))
    assert f"key {key!r}" in err.value.message, err.value.message
    assert fragment in err.value.message, err.value.message
    assert err.value.line == 2
