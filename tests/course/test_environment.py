"""The pins: pyproject.toml and environment.yml agree, torch is the CPU build, no CUDA wheels."""

from __future__ import annotations

import importlib.metadata as md
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _pyproject_pins() -> dict[str, str]:
    """The exact pins of the course's environment. A requirement of the wheel may be a range
    (``torch>=2.4``: the book's launch notebooks must not replace a reader's torch) when the
    ``dev`` extra pins it exactly."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = [s for group in project["optional-dependencies"].values() for s in group]
    pinned = dict(_split(s) for s in extras)
    for spec in project["dependencies"]:
        if "==" in spec or _name(spec) not in pinned:
            pinned.update([_split(spec)])
    return pinned


def _name(spec: str) -> str:
    return re.match(r"[A-Za-z0-9_.\-]+", spec)[0].lower()


def _environment_pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "environment.yml").read_text().splitlines():
        m = re.match(r"^\s*-\s+([A-Za-z0-9_.\-]+==\S+)\s*$", line)
        if m:
            name, version = _split(m.group(1))
            pins[name] = version
    return pins


def _split(spec: str) -> tuple[str, str]:
    name, sep, version = spec.partition("==")
    assert sep, f"dependency {spec!r} is not pinned with '==': pin it exactly"
    return name.strip().lower(), version.strip()


def test_environment_yml_matches_pyproject():
    py, env = _pyproject_pins(), _environment_pins()
    assert py, "no pins found in pyproject.toml"
    only_py = sorted(set(py) - set(env))
    only_env = sorted(set(env) - set(py))
    assert not only_py and not only_env, f"only in pyproject: {only_py}; only in env: {only_env}"
    differ = {k: (py[k], env[k]) for k in py if py[k] != env[k]}
    assert not differ, f"versions differ (pyproject, environment.yml): {differ}"


def test_key_pins():
    pins = _pyproject_pins()
    assert pins["torch"] == "2.13.0", "torch must be pinned to 2.13.0 (the CPU wheel)"
    assert pins["jupyter-book"].startswith("1.0."), "Jupyter Book 2 fails offline: stay on 1.0.x"
    assert pins["nbgrader"].startswith("0.9.")


def test_installed_versions_match_pins():
    wrong = {}
    for name, version in _pyproject_pins().items():
        installed = md.version(name)
        if installed.split("+")[0] != version:
            wrong[name] = (version, installed)
    assert not wrong, f"installed versions differ from the pins (pinned, installed): {wrong}"


def _no_deps_pins() -> dict[str, str]:
    """Packages the Makefile installs with ``pip install --no-deps`` (not in pyproject.toml)."""
    m = re.search(r"^NO_DEPS_PINS := (.*)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert m, "Makefile defines no NO_DEPS_PINS"
    return dict(_split(s) for s in m.group(1).split())


def test_no_deps_pins_agree_and_are_installed():
    pins = _no_deps_pins()
    assert pins, "NO_DEPS_PINS is empty"
    assert not set(pins) & set(_pyproject_pins()), "a --no-deps package is also in pyproject.toml"
    comment = (REPO / "environment.yml").read_text()
    wrong = {}
    for name, version in pins.items():
        assert f"pip install --no-deps {name}=={version}" in comment, (
            f"environment.yml should tell conda users to `pip install --no-deps {name}=={version}`"
        )
        installed = md.version(name)
        if installed != version:
            wrong[name] = (version, installed)
        # its declared dependencies, except torchvision (never imported), must be installed
        for requirement in md.requires(name) or []:
            dep = re.split(r"[\s;<>=!~\[]", requirement, maxsplit=1)[0]
            if dep.lower() != "torchvision" and "extra ==" not in requirement:
                md.version(dep)  # raises PackageNotFoundError when missing
    assert not wrong, f"--no-deps packages differ from the Makefile pins: {wrong}"


def test_no_cuda_wheels_installed():
    nvidia = sorted(
        d.metadata["Name"]
        for d in md.distributions()
        if d.metadata["Name"].lower().startswith("nvidia-")
    )
    assert not nvidia, f"CUDA packages installed: {nvidia}; torch must stay on the CPU pin"


def test_an_xdist_group_runs_on_one_worker(tmp_path):
    """``make test``'s ``--dist loadgroup`` keeps each ``xdist_group`` on one worker (the browser
    tests share one survey of the book; tests/xdist_groups.py makes xdist 3.8 work with
    pytest 9)."""
    import shutil
    import subprocess
    import sys

    shutil.copy(REPO / "tests" / "xdist_groups.py", tmp_path / "conftest.py")
    (tmp_path / "test_grouped.py").write_text(
        "import os, pathlib, pytest\n"
        "@pytest.mark.xdist_group('one')\n"
        "@pytest.mark.parametrize('i', range(8))\n"
        "def test_grouped(i):\n"
        "    pathlib.Path(f'worker-{i}').write_text(os.environ['PYTEST_XDIST_WORKER'])\n"
        "@pytest.mark.parametrize('i', range(8))\n"
        "def test_free(i):\n"
        "    pass\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup",
         "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**__import__("os").environ, "COURSE_TEST_THREADS": "1"},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    workers = {(tmp_path / f"worker-{i}").read_text() for i in range(8)}
    assert len(workers) == 1, f"the group ran on {sorted(workers)}: xdist_group is not honoured"
