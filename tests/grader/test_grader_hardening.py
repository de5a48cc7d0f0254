"""Issue 13 (items 4, 5): the trusted side is bounded, fallback mode is never silent, and the grader
leaves nothing behind. Each case was possible before the hardening (see the corpus for the rest)."""

from __future__ import annotations

import io
import os
import resource
import socket
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch

from autograder.host import runner
from autograder.sandbox import zygote
from autograder.wire import protocol


def _deflated(obj) -> bytes:
    """A torch.save archive whose records are deflated: small on the wire, huge once decoded."""
    plain = protocol.dumps(obj)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(plain)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info), compress_type=zipfile.ZIP_DEFLATED)
    return out.getvalue()


def test_a_deflated_storage_is_refused_before_decoding():
    data = _deflated({"value": torch.zeros(16 * 1024**2)})  # 64 MiB of zeros in ~64 KiB
    assert len(data) < 1024**2
    start = time.perf_counter()
    with pytest.raises(protocol.ProtocolError, match="compressed"):
        protocol.loads(data)
    assert time.perf_counter() - start < 1.0


def test_a_pickle_of_shared_lists_is_refused_before_it_expands():
    bomb: list = []
    for _ in range(25):  # 4**25 lists as a tree, 25 as a graph (and not nested too deeply)
        bomb = [bomb] * 4
    data = protocol.dumps({"ok": True, "value": bomb})
    assert len(data) < 64 * 1024
    start = time.perf_counter()
    with pytest.raises(protocol.ProtocolError, match="more than"):
        protocol.loads(data)
    assert time.perf_counter() - start < 5.0


def test_shared_tensor_storage_counts_per_reference():
    big = torch.zeros(1024**2)  # 4 MiB
    with pytest.raises(protocol.ProtocolError, match="bytes of tensors"):
        protocol.check_plain([big] * 300)  # 1.2 GiB once each reference is a tensor
    protocol.check_plain({"ok": True, "value": [big] * 10})


def test_a_huge_view_of_a_tiny_storage_is_refused():
    tiny = torch.zeros(1)
    huge = torch.empty(0).set_(tiny.untyped_storage(), 0, (10**6, 10**6), (0, 0))
    with pytest.raises(protocol.ProtocolError, match="bytes of tensors"):
        protocol.loads(protocol.dumps({"ok": True, "value": huge}))


def test_ordinary_replies_still_pass():
    reply = {"ok": True, "value": {"out": torch.randn(4, 5), "n": [1, 2.0, "x", None]}}
    back = protocol.loads(protocol.dumps(reply))
    assert torch.equal(back["value"]["out"], reply["value"]["out"])


def test_runner_children_have_a_memory_limit():
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            runner._limit_memory(256 * 1024**2)
            soft, _ = resource.getrlimit(resource.RLIMIT_AS)
            try:
                bytearray(1024**3)
            except MemoryError:
                code = 0 if soft != resource.RLIM_INFINITY else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_auto_mode_refuses_without_namespaces_and_says_how_to_proceed(tmp_path):
    config = {
        "mode": "auto",
        "simulate_no_namespaces": True,
        "limits": {},
        "scratch": str(tmp_path),
        "preimport": [],
    }
    pid, sock = zygote.start_zygote(config)
    sock.settimeout(60)
    reply = protocol.recv(sock)
    sock.close()
    os.waitpid(pid, 0)
    assert reply["ready"] is False
    assert "--sandbox fallback" in reply["error"] and "NOT guaranteed" in reply["error"]


def test_the_hidden_suite_runs_from_a_private_verified_copy(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_x.py").write_text("def test_a():\n    pass\n")
    copies = runner.SuiteCopies()
    try:
        copy = Path(copies.get(str(suite)))
        assert copy != suite and (copy / "test_x.py").read_text() == "def test_a():\n    pass\n"
        assert not os.access(copy, os.W_OK) or os.geteuid() == 0
        assert oct((copy / "test_x.py").stat().st_mode & 0o777) == "0o400"
        # a student who rewrote the instructor's suite or the copy changes nothing that runs
        (suite / "test_x.py").write_text("def test_a():\n    import os; os.system('pwn')\n")
        os.chmod(copy, 0o700)
        os.chmod(copy / "test_x.py", 0o600)
        (copy / "test_x.py").write_text("pwned")
        (copy / "conftest.py").write_text("pwned")
        again = Path(copies.get(str(suite)))
        assert sorted(p.name for p in again.iterdir()) == ["test_x.py"]
        assert (again / "test_x.py").read_text() == "def test_a():\n    pass\n"
    finally:
        copies.close()
    assert not os.path.exists(copies.root)


@pytest.mark.slow
def test_grading_leaves_no_scratch_folder_behind(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "grader"))
    import corpus

    course = corpus.make_course(tmp_path / "course")
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "empty.ipynb").write_bytes(b"")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    corpus.cli(
        "--course-dir", str(course), "grade", corpus.ASSIGNMENT, "--submissions", str(subs),
        "--out", str(tmp_path / "out"), "--jobs", "1", "--no-gradebook", "--quiet",
        env={"TMPDIR": str(scratch)},
    )  # fmt: skip
    assert sorted(os.listdir(scratch)) == []


def test_unix_socket_pair_is_not_a_route_around_the_limits():
    a, b = socket.socketpair()
    with a, b:
        b.sendall(protocol.HEADER.pack(protocol.MAX_MESSAGE + 1))
        with pytest.raises(protocol.ProtocolError, match="exceeds"):
            protocol.recv(a)


_LINKED = """
import tempfile, time
import autograder.sandbox.zygote as Z
from autograder.host import proxy
from autograder.wire import protocol
config = {"mode": "auto", "hide": [], "limits": {"cpu": 30}, "scratch": tempfile.mkdtemp(),
          "preimport": ["torch", "course_lib", "autograder.sandbox.worker"]}
pid, sock = Z.start_zygote(config)
sock.settimeout(120)
ready = protocol.recv(sock)
assert ready["ready"], ready
state = proxy.TestState(seed=1, timeout=10.0)
code = "import fractions\\ndef f(x):\\n    return x + 1\\n"
session = proxy.WorkerSession(proxy.ZygoteClient(sock), [("cell 1", code, [0, 1])], state=state,
                              deadline=time.monotonic() + 60)
print("RESULT", proxy.Student(session).f(1))
session.close()
sock.close()
"""


@pytest.mark.skipif(not zygote.namespaces.available(), reason="needs namespaces")
def test_an_interpreter_reached_through_a_link_starts_the_sandbox(tmp_path):
    """Issue 28: a venv at a path that is a symbolic link (Gradescope's /autograder/venv) made
    the zygote exit at start: the allowlist holds real paths, Python the linked ones."""
    import subprocess

    link = tmp_path / "venv"
    link.symlink_to(Path(sys.prefix).resolve())
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([str(link / "bin" / "python"), "-c", _LINKED], cwd=repo,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert "RESULT 2" in out.stdout, out.stdout[-2000:] + out.stderr[-3000:]


def test_statements_dropped_from_the_releases_own_cells_are_not_a_note_to_the_student():
    """A provided (read-only) set-up cell such as ``torch.set_num_threads(1)`` is the
    instructor's: the grader runs its definitions and says nothing about what it leaves out (a
    note on every student's feedback read as a problem with their notebook); a student's cell
    with the same statement gets the note."""
    from autograder.course.notebook import CodeChunk, extract

    source = "import torch\n\ntorch.set_num_threads(1)\nSIZE = 4\n"
    provided, notes = extract(CodeChunk("cell 2 (setup)", source, "release"))
    assert notes == [] and provided.dropped == ["line 3: torch.set_num_threads(1)"]
    _, notes = extract(CodeChunk("cell 5 (answer)", source, "student"))
    assert notes == [
        "cell 5 (answer): top-level statements not run by the grader: "
        "line 3: torch.set_num_threads(1)"
    ]
