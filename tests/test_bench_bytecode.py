"""scripts/bench compiles the hopper it times before timing it.

A checkout run in place with PYTHONDONTWRITEBYTECODE set compiles every module
again on every command; the bench writes the bytecode first, as `pip install`
does, so its CLI figures measure hopper, not the compiler.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "scripts" / "bench"


def load_bench() -> ModuleType:
    sys.path.insert(0, str(BENCH.parent))  # its sibling diskstate
    try:
        loader = importlib.machinery.SourceFileLoader("hopper_bench_bytecode", str(BENCH))
        spec = importlib.util.spec_from_loader("hopper_bench_bytecode", loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["hopper_bench_bytecode"] = module
        loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH.parent))


bench = load_bench()


def test_the_package_timed_is_the_one_this_interpreter_imports() -> None:
    import hopper

    assert bench.hopper_package() == Path(hopper.__file__).parent


def test_every_module_gets_its_bytecode(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "mod.py").write_text("X = 1\n")
    bench.compile_package(pkg)
    tag = sys.implementation.cache_tag
    assert (pkg / "__pycache__" / f"__init__.{tag}.pyc").is_file()
    assert (pkg / "sub" / "__pycache__" / f"mod.{tag}.pyc").is_file()


def test_a_module_that_does_not_compile_stops_the_bench(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("def broken(:\n")
    with pytest.raises(RuntimeError, match=f"compiling {pkg} failed"):
        bench.compile_package(pkg)
