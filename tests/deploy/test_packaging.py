"""The wheel, installed into a fresh virtual environment, is one import package,
``draftgate``, and every ``draftgate`` subcommand runs from it.

The new environment gets the wheel alone (``--no-deps``); its dependencies come
from this test run's own environment through a ``.pth`` line, so the test needs
no registry. A ``.pth`` line adds a folder to ``sys.path`` but runs none of the
``.pth`` files in it, so the checkout's editable install stays out of sight, and
every command runs from a folder outside the checkout.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from draftgate.cli.main import SUBCOMMANDS

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # built from a copy of what the build reads: setuptools writes its build/ beside the sources
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("draftgate", "policy", "proxy"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(source)], check=True, timeout=300, cwd=out)
    (built,) = out.glob("draftgate-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fresh environment's python, with the wheel installed in it."""
    env = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(env)
    python = env / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                   check=True, timeout=300)
    return python


def test_the_wheel_holds_one_top_level_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"draftgate"}
    # the mapped folders land inside it, with the data the product reads
    for expected in ("draftgate/policy/law.py", "draftgate/proxy/app.py", "draftgate/emulator/app.py",
                     "draftgate/workloads/bfcl_sample.jsonl", "draftgate/workloads/arms/arm_A.jsonl"):
        assert expected in names
    assert not any(name.endswith((".c", ".h", ".so")) for name in names)
    assert not any(name.startswith(("draftgate/bench", "bench/", "tests/")) for name in names)


def test_every_subcommand_runs_from_the_installed_wheel(installed: Path, tmp_path: Path) -> None:
    found = subprocess.run([str(installed), "-c", "import draftgate.proxy.app as m; print(m.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert found.returncode == 0, found.stderr
    assert str(ROOT) not in found.stdout  # the installed copy, not the checkout's
    script = installed.parent / "draftgate"
    for command in ["--help", *(f"{name} --help" for name in SUBCOMMANDS)]:
        proc = subprocess.run([str(script), *command.split()], capture_output=True, text=True, cwd=tmp_path,
                              timeout=60)
        assert proc.returncode == 0, f"draftgate {command}: {proc.stderr[-2000:]}"
        assert "usage: draftgate" in proc.stdout


def test_every_module_of_the_installed_package_imports(installed: Path, tmp_path: Path) -> None:
    """``--help`` imports each subcommand's module, and those import the rest only when run."""
    probe = ("import importlib, pkgutil, draftgate\n"
             "names = [m.name for m in pkgutil.walk_packages(draftgate.__path__, 'draftgate.') if not m.name.endswith('__main__')]\n"
             "for name in names: importlib.import_module(name)\n"
             "print(len(names))")
    proc = subprocess.run([str(installed), "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout) > 60


def test_only_draftgate_is_importable_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    probe = ("import importlib.util, sys\n"
             "print(*[name for name in ('policy', 'proxy', 'lab', 'bench') if importlib.util.find_spec(name)])")
    proc = subprocess.run([str(installed), "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


def _imports_of(folder: Path) -> list[tuple[str, str]]:
    """(file, imported module) for every import in the Python files under ``folder``."""
    import ast

    found = []
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [(str(path.relative_to(folder)), name) for name in names]
    return found


def _reaching(folder: Path, forbidden: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(path, name) for path, name in _imports_of(folder)
            if any(name == f or name.startswith(f + ".") for f in forbidden)]


def test_the_emulator_imports_nothing_of_the_gate() -> None:
    """The emulator is the truth the gate is graded against: it shares the wire with the
    proxy, never its model, so it imports nothing of ``policy`` or the proxy."""
    import draftgate.emulator

    forbidden = ("draftgate.policy", "draftgate.proxy", "policy", "proxy")
    assert _reaching(Path(draftgate.emulator.__file__).parent, forbidden) == []


def test_dependencies_point_one_way() -> None:
    """The proxy imports none of the commands around it, calibration nothing of the proxy,
    and policy neither of them: each can be read, tested and changed without the others."""
    import draftgate.calibrate
    import draftgate.policy
    import draftgate.proxy

    commands = ("draftgate.cli", "draftgate.evaluate", "draftgate.demo", "draftgate.calibrate",
                "draftgate.measure", "draftgate.simulate")
    assert _reaching(Path(draftgate.proxy.__file__).parent, commands) == []
    assert _reaching(Path(draftgate.calibrate.__file__).parent, ("draftgate.proxy",)) == []
    assert _reaching(Path(draftgate.policy.__file__).parent,
                     ("draftgate.proxy", "fastapi", "starlette", "httpx", "uvicorn", *commands)) == []
