"""The package as a user installs it: a wheel built from this source, installed into a fresh virtual
environment, run from a folder outside the repository with no setting pointing back into it. The
wheel must carry what it needs (the tiny scenario, the shipped models and best-static results, the
trace checksums, py.typed, the entry points).

The dependencies (NumPy, torch ...) are not installed again: the fresh environment sees this one's
site-packages through a .pth line, which Python adds to sys.path after the environment's own
site-packages (so ``import td3sched`` finds the wheel's copy) without running the .pth files found
there (so an editable install of td3sched in this environment stays out)."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(args, cwd, env, ok=True):
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if ok:
        assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python, td3sched executable, environment variables, a working folder) of a fresh install."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"  # a copy: building in the checkout would leave build/ and *.egg-info there
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "src", source / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.nbi", "*.nbc"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                            "-w", str(tmp / "dist"), str(source)], capture_output=True, text=True, timeout=600)
    if build.returncode != 0 and "setuptools" in build.stderr.lower() and "requirement" in build.stderr.lower():
        pytest.skip(f"this environment cannot build the wheel without downloading setuptools: {build.stderr[-300:]}")
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp / "dist").glob("td3sched-*.whl")

    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp,
                        None).stdout.strip())
    (purelib / "_outer_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "--quiet", wheel],
         tmp, None)

    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "TD3SCHED_TRACES", "TD3SCHED_MODELS", "VIRTUAL_ENV")}
    env["XDG_DATA_HOME"] = str(tmp / "xdg")  # no traces there
    env["HOME"] = str(tmp / "home")
    work = tmp / "elsewhere"
    work.mkdir()
    where = _run([python, "-c", "import td3sched; print(td3sched.__file__)"], work, env).stdout.strip()
    assert Path(where).is_relative_to(env_dir), f"td3sched imported from {where}, not from the wheel"
    return python, env_dir / "bin" / "td3sched", env, work


def test_version_from_the_wheel(installed):
    python, exe, env, work = installed
    import td3sched

    assert _run([exe, "--version"], work, env).stdout.strip() == f"td3sched {td3sched.__version__}"
    assert _run([python, "-m", "td3sched", "--version"], work, env).stdout.strip() == f"td3sched {td3sched.__version__}"


def test_a_tiny_simulation_and_the_shipped_model(installed):
    python, exe, env, work = installed
    _run([exe, "simulate", "--scenario", "tiny", "--span", "test", "--no-progress", "--out", "run.json"], work, env)
    assert (work / "run.json").stat().st_size > 0
    pytest.importorskip("torch")
    proc = _run([exe, "simulate", "--scenario", "tiny", "--span", "test", "--no-progress",
                 "--policy", "td3:td3-dlrm"], work, env)
    assert "td3:td3-dlrm" in proc.stdout
    resolved = _run([python, "-c", "from td3sched.search.best_static import resolve_policy; "
                                   "print(resolve_policy('best-static', 'dlrm', [])[1])"], work, env).stdout
    assert resolved.startswith("static-weights:")
    assert not (work / "models").exists() and sorted(p.name for p in work.iterdir()) == ["run.json"]


def test_traces_say_where_they_are_expected_and_where_they_come_from(installed):
    _, exe, env, work = installed
    proc = _run([exe, "traces", "--no-progress"], work, env, ok=False)
    assert proc.returncode == 1
    text = " ".join((proc.stdout + proc.stderr).split())
    assert f"{env['XDG_DATA_HOME']}/td3sched/traces" in text and "github.com/alibaba/clusterdata" in text


def test_package_data_and_entry_points(installed):
    python, _, env, work = installed
    code = ("import importlib.metadata as m, importlib.resources as r; "
            "print(sorted(e.value for e in m.entry_points(group='gymnasium.envs') if e.name == 'td3sched')); "
            "print(r.files('td3sched').joinpath('py.typed').is_file())")
    out = _run([python, "-c", code], work, env).stdout.split("\n")
    assert out[0] == "['td3sched.envs:register_envs']" and out[1] == "True"
