"""The tree tells the architecture: who may import whom (autograder/README.md, "The tree").

Every ``import`` and ``from ... import`` statement of every module, at any depth (imports inside
functions count: they run too), is read from the source and resolved to the grader's packages.
The rules:

- ``autograder.wire``: imports nothing else of the grader (both sides of the boundary import it);
- ``autograder.sandbox`` (the only code that runs student code): the wire and itself;
- ``autograder.course`` (the course's files and release policy): itself only;
- ``autograder.host`` (the trusted grading path): course, wire, sandbox (its runner starts the
  zygote) and itself, never the instructor tools, the integrations or the command line;
- ``autograder.integrations`` and ``autograder.tools``: anything but the command line;
- the book's extensions and scripts: ``autograder.course`` only; ``course_lib``: no grader at all.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import time_limits

REPO = Path(__file__).resolve().parents[2]

ALLOWED = {
    "autograder.wire": {"autograder.wire"},
    "autograder.sandbox": {"autograder.sandbox", "autograder.wire"},
    "autograder.course": {"autograder.course"},
    "autograder.host": {
        "autograder.host", "autograder.course", "autograder.wire", "autograder.sandbox",
    },
    "autograder.integrations": {
        "autograder.integrations", "autograder.host", "autograder.course", "autograder.wire",
        "autograder.sandbox", "autograder.tools",
    },
    "autograder.tools": {
        "autograder.tools", "autograder.host", "autograder.course", "autograder.wire",
        "autograder.sandbox", "autograder.integrations",
    },
    "book": {"autograder.course"},
    "course_lib": set(),
}  # fmt: skip
PACKAGES = [
    "autograder.wire", "autograder.sandbox", "autograder.course", "autograder.host",
    "autograder.integrations", "autograder.tools", "autograder.commands", "autograder.cli",
]  # fmt: skip


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, root: Path) -> set[str]:
    """The absolute names of the ``autograder`` modules (or objects) ``path`` imports."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = module_name(path, root).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            names |= {f"{base}.{a.name}" for a in node.names} | {base}
    return {n for n in names if n == "autograder" or n.startswith("autograder.")}


def area(name: str) -> str | None:
    return next((p for p in PACKAGES if name == p or name.startswith(p + ".")), None)


def violations(root: Path) -> list[str]:
    """``importer -> imported`` for every import the rules above forbid, under ``root``."""
    found = []
    files = [(p, area(module_name(p, root))) for p in sorted((root / "autograder").rglob("*.py"))]
    files += [(p, "book") for p in sorted((root / "book").glob("[!_]*/**/*.py"))]
    files += [(p, "book") for p in sorted((root / "book" / "_ext").rglob("*.py"))]
    files += [(p, "course_lib") for p in sorted((root / "course_lib").rglob("*.py"))]
    for path, owner in files:
        if owner not in ALLOWED:  # the command line and the hidden suites may import anything
            continue
        for name in sorted(imported(path, root)):
            target = area(name)
            if name == "autograder" or target is None or target not in ALLOWED[owner]:
                found.append(f"{path.relative_to(root)} ({owner}) imports {name}")
    return found


def test_every_import_respects_the_trust_boundaries():
    assert violations(REPO) == []


def test_the_checker_catches_a_sandbox_module_that_imports_the_host(tmp_path):
    for package in ("autograder", "autograder/sandbox", "autograder/host", "autograder/wire"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "autograder/sandbox/worker.py").write_text(
        "from autograder.wire import protocol\n"
        "def serve():\n    from ..host.grader import Grader  # hidden in a function\n"
    )
    (tmp_path / "autograder/host/grader.py").write_text("from autograder.tools import mutants\n")
    assert violations(tmp_path) == [
        "autograder/host/grader.py (autograder.host) imports autograder.tools",
        "autograder/host/grader.py (autograder.host) imports autograder.tools.mutants",
        "autograder/sandbox/worker.py (autograder.sandbox) imports autograder.host.grader",
        "autograder/sandbox/worker.py (autograder.sandbox) imports autograder.host.grader.Grader",
    ]


def test_importing_the_worker_or_the_book_policy_loads_no_grader_module():
    """At run time too: what the worker and the book's extensions import drags in nothing else."""
    probe = (
        "import sys, importlib\n"
        "for name in sys.argv[1:]:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.startswith('autograder.')))\n"
    )
    for module, allowed in (
        ("autograder.sandbox.worker", ("autograder.sandbox", "autograder.wire")),
        ("autograder.course.embargo", ("autograder.course",)),
    ):
        out = subprocess.run(
            [sys.executable, "-c", probe, module], capture_output=True, text=True, cwd=REPO
        )
        assert out.returncode == 0, out.stderr
        loaded = ast.literal_eval(out.stdout.strip().splitlines()[-1])
        assert loaded and all(m.startswith(allowed) for m in loaded), (module, loaded)


def test_the_library_tests_never_import_the_grader():
    """``pytest tests/lib`` is the fast loop: collecting it imports no grader module."""
    probe = (
        "import sys, pytest\n"
        "code = pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', 'tests/lib'])\n"
        "print(code, sorted(m for m in sys.modules if m.split('.')[0] == 'autograder'))\n"
    )
    out = time_limits.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, cpu=600
    )
    assert out.stdout.strip().splitlines()[-1] == "0 []", out.stdout[-2000:] + out.stderr[-2000:]
