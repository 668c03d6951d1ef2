"""core/redaction.py: a prompt's env values withheld, pure text in and out."""

from __future__ import annotations

import pytest

from hopper.core.prompt import parse
from hopper.core.redaction import WITHHELD, Withheld, redact, restore, withheld

TOKEN = "tok-0123456789abcdef"


@pytest.mark.parametrize(
    "front",
    [
        f'env = {{ TOKEN = "{TOKEN}", MODE = "1" }}',
        f'[env]\nTOKEN = "{TOKEN}"\nMODE = "1"',
        f'env.TOKEN = \'{TOKEN}\'\nenv.MODE = """1"""',
        'env = { TOKEN = "tok-0123456789\\u0061bcdef", MODE = "\\u0031" }',  # escapes
    ],
)
def test_every_way_of_writing_env_is_withheld(front: str) -> None:
    text = f'+++\nagent = "bash"\nretries = 1\n{front}\n+++\necho $TOKEN $MODE\n'
    out = redact(text)
    assert TOKEN not in out
    spec = parse(out.encode())  # still a prompt hopper reads
    assert spec.options.env == {"TOKEN": WITHHELD, "MODE": WITHHELD}
    assert spec.options.retries == 1 and spec.body == "echo $TOKEN $MODE\n"
    assert withheld(out) == Withheld(("MODE", "TOKEN"), 0)


def test_a_long_value_is_withheld_everywhere_a_short_one_only_from_env() -> None:
    text = (
        f'+++\nenv = {{ TOKEN = "{TOKEN}", MODE = "fast" }} # was {TOKEN}\n'
        f'check = ["curl", "-H", "Bearer {TOKEN}"]\nname = "fast"\n+++\n'
        f"use {TOKEN} fast\n"
    )
    out = redact(text)
    assert TOKEN not in out and "# was" not in out  # comments go
    spec = parse(out.encode())
    assert spec.options.check == ["curl", "-H", f"Bearer {WITHHELD}"]
    assert spec.options.name == "fast" and spec.body == f"use {WITHHELD} fast\n"
    assert withheld(out) == Withheld(("MODE", "TOKEN"), 2)


def test_values_known_from_elsewhere_are_withheld_too() -> None:
    """The admitted values (admission.json), even if prompt.md no longer names them."""
    assert redact(f"no front matter, {TOKEN}\n", [TOKEN]) == f"no front matter, {WITHHELD}\n"
    assert redact("+++\nagent = 'bash'\n+++\nshort\n", ["short"]).endswith("\nshort\n")


def test_a_prompt_without_values_is_kept_byte_for_byte() -> None:
    text = '+++\nagent = "bash"   # keep me\n+++\nbody\n'
    assert redact(text) == text
    assert redact("just text\n") == "just text\n"
    assert withheld(text) == Withheld((), 0)


@pytest.mark.parametrize(
    "front",
    [f'env = {{ TOKEN = "{TOKEN}"', f'env = {{ TOKEN = "{TOKEN}" }}\n[foo]\nbar = {{ x = 1 }}'],
)
def test_front_matter_hopper_cannot_rewrite_is_withheld_whole(front: str) -> None:
    out = redact(f"+++\n{front}\n+++\nbody\n")
    assert TOKEN not in out
    assert out == f"+++\n# {WITHHELD}: the front matter\n+++\nbody\n"
    assert withheld(out).elsewhere == 1


def test_restore_gives_values_back() -> None:
    out = redact(f'+++\nagent = "bash"\nenv = {{ TOKEN = "{TOKEN}" }}\n+++\necho\n')
    back = parse(restore(out, {"TOKEN": "new"}).encode())
    assert back.options.env == {"TOKEN": "new"} and back.options.agent == "bash"
    assert parse(restore("echo\n", {"A": "b"}).encode()).options.env == {"A": "b"}
    with pytest.raises(ValueError, match="not TOML"):
        restore("+++\nenv = {\n+++\n", {"A": "b"})
