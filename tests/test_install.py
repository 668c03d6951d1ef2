"""install.sh, run for real into temporary trees: a user install and a staged system install.

Nothing here touches the machine: the user install gets a temporary HOME, the
system install ``--dest-root`` (which never runs useradd or systemctl), and
every run passes ``--no-systemctl``. A wheel of this checkout is built once per
session and each mode's venv is created once (``Install.ensure``); re-runs
(the idempotency checks) reuse it. The uninstall test goes last and the next
user of a fixture re-installs if it ran first.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
INSTALL = REPO / "install.sh"
SYSTEM_BIN = "/opt/hopper/bin/hopper"

pytestmark = pytest.mark.timeout(600)


def run(
    args: list[str], env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, env=env, timeout=timeout, check=False, cwd=REPO
    )


def files(top: Path) -> dict[str, str]:
    """Relative path -> sha256 (or the link target) of everything outside the venvs."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        here = Path(dirpath)
        if (here / "pyvenv.cfg").exists():
            dirnames[:] = []
            out[str(here.relative_to(top))] = "venv"
            continue
        for name in filenames:
            path = here / name
            rel = str(path.relative_to(top))
            if path.is_symlink():
                out[rel] = "-> " + os.readlink(path)
            else:
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", str(REPO), "-w", str(out)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    (whl,) = out.glob("hopper_jobs-*.whl")  # the distribution: PyPI's "hopper" is not ours
    return whl


def distributions(venv: Path) -> set[str]:
    listed = run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"], {})
    assert listed.returncode == 0, listed.stderr
    return {line.split("==")[0].lower() for line in listed.stdout.splitlines()}


@dataclass
class Install:
    """One install.sh target: a HOME for the user mode, a --dest-root for the system mode."""

    base: Path
    wheel: Path
    system: bool
    first: subprocess.CompletedProcess[str] | None = None
    snapshots: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return self.base / "home"

    @property
    def stage(self) -> Path:
        return self.base / "stage"

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "HOPPER_"))}
        env.pop("DESTDIR", None)
        return {**env, "HOME": str(self.home)}

    def args(self, *extra: str) -> list[str]:
        mode = ["--system", "--dest-root", str(self.stage)] if self.system else []
        return ["bash", str(INSTALL), *mode, "--no-systemctl", "--source", str(self.wheel), *extra]

    def run(self, *extra: str) -> subprocess.CompletedProcess[str]:
        return run(self.args(*extra), self.env)

    @property
    def hopper(self) -> Path:
        if self.system:
            return self.stage / SYSTEM_BIN.lstrip("/")
        return self.home / ".local" / "bin" / "hopper"

    def ensure(self) -> None:
        """Install (once): the user mode first plain, then with --user-unit."""
        if self.hopper.exists():
            return
        self.home.mkdir(parents=True, exist_ok=True)
        self.first = self.run()
        assert self.first.returncode == 0, self.first.stdout + self.first.stderr
        if not self.system:
            self.snapshots["plain"] = files(self.home)
            second = self.run("--user-unit")
            assert second.returncode == 0, second.stdout + second.stderr
            self.first = second


@pytest.fixture(scope="session")
def user_install(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Iterator[Install]:
    inst = Install(tmp_path_factory.mktemp("user"), wheel, system=False)
    yield inst
    shutil.rmtree(inst.base, ignore_errors=True)


@pytest.fixture(scope="session")
def system_install(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Iterator[Install]:
    inst = Install(tmp_path_factory.mktemp("system"), wheel, system=True)
    yield inst
    shutil.rmtree(inst.base, ignore_errors=True)


@pytest.fixture
def user(user_install: Install) -> Install:
    user_install.ensure()
    return user_install


@pytest.fixture
def system(system_install: Install) -> Install:
    system_install.ensure()
    return system_install


def verify(unit: Path, *, user_mode: bool, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.fail("systemd-analyze not found: apt-get install systemd")
    env = dict(os.environ)
    args = [analyze, "verify", str(unit)]
    if user_mode:
        runtime = tmp_path / "runtime"
        runtime.mkdir(mode=0o700)
        runtime.chmod(0o700)
        env["XDG_RUNTIME_DIR"] = str(runtime)
        args.insert(1, "--user")
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=60, check=False)


# --- the user install ---------------------------------------------------------------


def test_user_install_runs(user: Install, tmp_path: Path) -> None:
    result = run([str(user.hopper), "--version"], user.env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("hopper ")
    assert user.hopper.is_symlink()
    assert os.readlink(user.hopper) == str(
        user.home / ".local" / "share" / "hopper" / "venv" / "bin" / "hopper"
    )
    # and the README's promise: the installed command runs the demo with no config
    demo = run([str(user.hopper), "demo"], {**user.env, "HOME": str(tmp_path)}, timeout=120)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert (tmp_path / ".local" / "state" / "hopper" / "processed").is_dir()
    # its dependencies came along: shtab, for the README's completion step
    completion = run([str(user.hopper), "completion", "bash"], user.env)
    assert completion.returncode == 0, completion.stderr
    assert "complete -o bashdefault -F _shtab_hopper hopper" in completion.stdout


def test_plain_user_install_lays_down_only_the_venv_and_the_command(user: Install) -> None:
    plain = user.snapshots.get("plain")
    if plain is None:
        pytest.skip("the user install was re-created by another test")
    ours = {p for p in plain if "hopper" in p}  # tools may leave their own dot-files in HOME
    assert ours == {
        ".local/share/hopper/venv",
        ".local/bin/hopper",
        ".local/share/man/man1/hopper.1",  # `man hopper`: man looks in ../share/man of PATH
    }


def test_man_hopper_works_after_the_quick_start(user: Install) -> None:
    """``man`` finds the page from PATH alone (share/man beside ~/.local/bin), and it
    is the page of the installed hopper."""
    env = {k: v for k, v in user.env.items() if k != "MANPATH"}
    env["PATH"] = f"{user.hopper.parent}:/usr/bin:/bin"
    where = run(["man", "-w", "hopper"], env)
    page = user.home / ".local" / "share" / "man" / "man1" / "hopper.1"
    assert (where.returncode, where.stdout.strip()) == (0, str(page)), where.stderr
    version = run([str(user.hopper), "--version"], env).stdout.split()[1]
    assert f'"hopper {version}" "User Commands"' in page.read_text()


def test_user_unit_is_rendered_and_verifies(user: Install, tmp_path: Path) -> None:
    unit = user.home / ".config" / "systemd" / "user" / "hopper.service"
    text = unit.read_text()
    venv_bin = user.home / ".local" / "share" / "hopper" / "venv" / "bin" / "hopper"
    assert f"ExecStart={venv_bin} run\n" in text
    assert "@HOPPER_BIN@" not in text
    result = verify(unit, user_mode=True, tmp_path=tmp_path)
    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    assert user.first is not None
    assert "systemctl --user enable --now hopper" in user.first.stdout
    assert "not running systemctl" in user.first.stdout


def test_user_unit_config_and_env(user: Install) -> None:
    conf = user.home / ".config" / "hopper"
    assert (conf / "env").stat().st_mode & 0o777 == 0o600
    check = run([str(user.hopper), "config", "check", "--config", str(conf / "config.toml")], {})
    assert check.returncode == 0, check.stderr


def test_user_rerun_is_idempotent_and_keeps_edits(user: Install) -> None:
    config = user.home / ".config" / "hopper" / "config.toml"
    config.write_text(config.read_text() + "max_parallel = 2\n")
    before = files(user.home)
    again = user.run("--user-unit")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "kept:" in again.stdout
    assert files(user.home) == before
    assert config.read_text().endswith("max_parallel = 2\n")


def test_installed_doctor_without_agent_clis_exits_0(user: Install, tmp_path: Path) -> None:
    """A fresh install: no claude or codex on PATH and none installed yet. doctor passes
    (bash jobs run), names the missing CLIs and the command that installs them, and that
    command works from the installed package (its npm manifest ships in the wheel)."""
    path = tmp_path / "path"
    path.mkdir()
    (path / "bash").symlink_to(shutil.which("bash") or "/bin/bash")
    env = {**user.env, "HOME": str(tmp_path), "PATH": str(path)}
    root = tmp_path / "root"
    for sub in ("inbox", "runs", "processed"):
        (root / sub).mkdir(parents=True)
    doctor = run([str(user.hopper), "doctor", "--root", str(root)], env)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "ok    agent bash" in doctor.stdout
    assert "the claude CLI is not installed" in doctor.stdout
    assert "fix: hopper agents install" in doctor.stdout
    install = run([str(user.hopper), "agents", "install", "--dry-run"], env)
    assert install.returncode == 0, install.stderr
    prefix = tmp_path / ".local" / "share" / "hopper" / "agents"
    assert f"$ npm ci --prefix {prefix}" in install.stdout
    assert "@anthropic-ai/claude-code@" in install.stdout


# --- the staged system install ------------------------------------------------------


def test_system_install_lays_down_unit_config_env(system: Install) -> None:
    stage = system.stage
    laid = files(stage)
    assert set(laid) == {
        "opt/hopper",
        "usr/local/bin/hopper",
        "etc/systemd/system/hopper.service",
        "etc/hopper/config.toml",
        "etc/hopper/env",
        "usr/local/share/man/man1/hopper.1",
    }
    assert laid["usr/local/bin/hopper"] == "-> " + SYSTEM_BIN
    assert (stage / "etc/hopper/env").stat().st_mode & 0o777 == 0o600
    assert (stage / "etc/hopper/config.toml").stat().st_mode & 0o777 == 0o644
    assert (stage / "var/lib/hopper").stat().st_mode & 0o777 == 0o750
    unit = (stage / "etc/systemd/system/hopper.service").read_text()
    assert f"ExecStart={SYSTEM_BIN} run --root /var/lib/hopper\n" in unit
    assert system.first is not None
    out = system.first.stdout
    assert "sudo systemctl enable --now hopper" in out
    assert "staged under --dest-root" in out
    version = run([str(system.hopper), "--version"], system.env)
    assert version.returncode == 0, version.stderr


def test_system_unit_verifies(system: Install, tmp_path: Path) -> None:
    """verify needs ExecStart to exist: check it does in the stage, then verify re-rooted."""
    unit = system.stage / "etc/systemd/system/hopper.service"
    assert (system.stage / SYSTEM_BIN.lstrip("/")).is_file()
    staged = tmp_path / "hopper.service"
    staged.write_text(
        unit.read_text().replace(f"ExecStart={SYSTEM_BIN} ", f"ExecStart={system.hopper} ")
    )
    result = verify(staged, user_mode=False, tmp_path=tmp_path)
    assert (result.returncode, result.stderr) == (0, ""), result.stdout


def test_system_config_template_is_valid_and_all_defaults(system: Install) -> None:
    config = system.stage / "etc/hopper/config.toml"
    check = run([str(system.hopper), "config", "check", "--config", str(config)], {})
    assert check.returncode == 0, check.stderr
    import tomllib

    assert tomllib.loads(config.read_text()) == {}, "every key is commented out"


def test_system_rerun_is_idempotent(system: Install) -> None:
    env_file = system.stage / "etc/hopper/env"
    env_file.write_text("ANTHROPIC_API_KEY=sk-test\n")
    before = files(system.stage)
    again = system.run()
    assert again.returncode == 0, again.stdout + again.stderr
    assert files(system.stage) == before
    assert env_file.read_text() == "ANTHROPIC_API_KEY=sk-test\n"
    assert env_file.stat().st_mode & 0o777 == 0o600
    assert "after an upgrade" in again.stdout


def test_system_install_with_web(wheel: Path, tmp_path: Path) -> None:
    """--web: the 'web' extra in the venv and hopper-web.service beside the watcher's unit;
    --uninstall removes both."""
    inst = Install(tmp_path, wheel, system=True)
    inst.home.mkdir(parents=True)
    result = inst.run("--web")
    assert result.returncode == 0, result.stdout + result.stderr
    unit = inst.stage / "etc/systemd/system/hopper-web.service"
    text = unit.read_text()
    assert (
        f"ExecStart={SYSTEM_BIN} web --root /var/lib/hopper --host 127.0.0.1 --port 8642\n" in text
    )
    assert "sudo systemctl enable --now hopper-web" in result.stdout
    # the URL from the token file, not from the journal (hopper web never prints it there)
    print_url = "sudo -u hopper /usr/local/bin/hopper web --print-url --root /var/lib/hopper"
    assert print_url in result.stdout
    staged = tmp_path / "hopper-web.service"
    staged.write_text(text.replace(f"ExecStart={SYSTEM_BIN} ", f"ExecStart={inst.hopper} "))
    checked = verify(staged, user_mode=False, tmp_path=tmp_path)
    assert (checked.returncode, checked.stderr) == (0, ""), checked.stdout
    python = inst.stage / "opt/hopper/bin/python"
    imported = run([str(python), "-c", "import starlette, uvicorn, hopper.web.app"], inst.env)
    assert imported.returncode == 0, imported.stderr
    gone = inst.run("--uninstall")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert not unit.exists()


# --- usage errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    "args", [["--bogus"], ["--system", "--user-unit"], ["--prefix"], ["--dest-root"]]
)
def test_usage_errors_exit_2(args: list[str], tmp_path: Path) -> None:
    result = run(["bash", str(INSTALL), *args], {**os.environ, "HOME": str(tmp_path)})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "install.sh:" in result.stderr
    assert list(tmp_path.iterdir()) == []


# --- uninstall (last: it removes the session's installs) ----------------------------


def test_an_install_under_the_old_name_is_replaced(wheel: Path, tmp_path: Path) -> None:
    """A venv that holds hopper as the distribution "hopper" (its name before
    hopper-jobs) is upgraded to one distribution, hopper-jobs, not two owning one package."""
    old = tmp_path / "old-src"
    shutil.copytree(REPO / "src", old / "src", ignore=shutil.ignore_patterns("*.egg-info"))
    shutil.copytree(REPO / "man", old / "man")  # the manual page the wheel ships
    shutil.copy(REPO / "README.md", old / "README.md")
    text = (REPO / "pyproject.toml").read_text()
    (old / "pyproject.toml").write_text(text.replace('name = "hopper-jobs"', 'name = "hopper"'))
    built = run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(old), "-w", str(tmp_path)],
        dict(os.environ),
    )
    assert built.returncode == 0, built.stderr
    (old_wheel,) = tmp_path.glob("hopper-0*.whl")
    inst = Install(tmp_path / "inst", old_wheel, system=False)
    inst.home.mkdir(parents=True)
    first = inst.run()
    assert first.returncode == 0, first.stdout + first.stderr
    venv = inst.home / ".local" / "share" / "hopper" / "venv"
    assert {"hopper", "hopper-jobs"} & distributions(venv) == {"hopper"}

    inst.wheel = wheel
    again = inst.run()
    assert again.returncode == 0, again.stdout + again.stderr
    assert "removed:   the old distribution name 'hopper' (now hopper-jobs)" in again.stdout
    assert {"hopper", "hopper-jobs"} & distributions(venv) == {"hopper-jobs"}
    version = run([str(inst.hopper), "--version"], inst.env)
    assert (version.returncode, version.stdout.split()[0]) == (0, "hopper")
    assert "removed:" not in inst.run().stdout  # once only


def test_uninstall_removes_what_it_installed(system: Install, user: Install) -> None:
    data = system.stage / "var/lib/hopper/runs/job-1"
    data.mkdir(parents=True)
    (data / "job.json").write_text("{}")
    (system.stage / "etc/hopper/env").write_text("ANTHROPIC_API_KEY=sk-kept\n")
    result = system.run("--uninstall")
    assert result.returncode == 0, result.stdout + result.stderr
    assert set(files(system.stage)) == {
        "etc/hopper/env",  # changed since install: the operator's now
        "var/lib/hopper/runs/job-1/job.json",  # the jobs' data is never removed
    }
    assert "changed since install" in result.stdout
    again = system.run("--uninstall")
    assert again.returncode == 0, again.stdout + again.stderr

    state = user.home / ".local" / "state" / "hopper"
    state.mkdir(parents=True, exist_ok=True)
    config = user.home / ".config" / "hopper" / "config.toml"
    config.write_text(config.read_text() + "# mine\n")
    result = user.run("--uninstall")
    assert result.returncode == 0, result.stdout + result.stderr
    left = set(files(user.home))
    assert not any("hopper" in p for p in left if not p.startswith(".config/hopper/config")), left
    assert ".config/hopper/config.toml" in left, "edited, so kept"
    assert state.is_dir()
