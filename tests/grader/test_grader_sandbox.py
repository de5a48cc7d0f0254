"""The sandbox itself: a zygote and its workers, driven through the trusted proxy API.

Each test runs against two zygotes: ``auto`` (network and mount namespaces and a per-worker uid
where the system permits; as root here and in CI they are) and ``fallback`` (what an unprivileged
user gets: socket creation blocked, file access policed by an audit hook).
"""

from __future__ import annotations

import ast
import os
import shutil
import socket
import sys
import tempfile
import threading
import time

import pytest
import torch

import autograder.sandbox.zygote as zygote_module
from autograder.host import proxy
from autograder.wire import protocol
from autograder.wire.forbid import expand

CODE = """
import math, os, socket, subprocess, sys, resource
import torch
from torch import nn

EPS = 1e-6

def attention(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v

def facts():
    limits = {n: resource.getrlimit(getattr(resource, n))[0] for n in
              ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NPROC")}
    return {"uid": os.getuid(), "cwd": os.getcwd(), "files": sorted(os.listdir(".")),
            "env": dict(os.environ), "limits": limits, "sid": os.getsid(0) == os.getpid()}

def read(path):
    return open(path).read()

def library_source():
    import inspect
    import course_lib.layers as layers
    width = layers.LayerNorm(4)(torch.ones(2, 4)).shape[-1]
    try:
        return inspect.getsource(layers.LayerNorm)
    except (OSError, TypeError):
        return f"usable, source unreadable: {width}"

def listdir(path):
    return os.listdir(path)

def write(path):
    with open(path, "w") as f:
        f.write("pwned")

def write_here():
    with open("notes.txt", "w") as f:
        f.write("ok")
    return read("notes.txt")

def connect(port):
    socket.create_connection(("127.0.0.1", port), timeout=2).sendall(b"leak")

def spawn():
    return subprocess.run(["true"]).returncode

def fork():
    return os.fork()

def thread_bomb():
    import threading, time
    started = 0
    while started < 100000:
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        started += 1
    return started

def die(code):
    os._exit(code)

def loop():
    while True:
        pass

def chatty():
    print("x" * 100000)
    print("to stderr", file=sys.stderr)
    return 1

def sdpa(q):
    return getattr(torch.nn.functional, "scaled_dot" + "_product_attention")(q, q, q)

class Net(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return self.lin(x).tanh()

def apply(module, x):
    return module(x)

def make_generator(seed):
    return torch.Generator().manual_seed(seed)

# -- attacks (issue 13) ---------------------------------------------------------------------------

def sdpa_in_thread(q):
    import threading
    out = []
    t = threading.Thread(target=lambda: out.append(sdpa(q)))
    t.start()
    t.join()
    return out[0]

def raw_thread():
    import importlib.util
    fresh = importlib.util.module_from_spec(importlib.util.find_spec("_thread"))
    return fresh.start_new_thread(lambda: None, ())

def grader_modules():
    import importlib, sys
    found = [n for n in sys.modules if n.split(".")[0] in ("autograder", "pytest", "_pytest")]
    errors = []
    for how in (lambda: __import__("autograder." + "sandbox.detector"),
                lambda: importlib.import_module("autograder.sandbox.worker"),
                lambda: __import__("autograder")):
        try:
            how()
            errors.append("imported")
        except ImportError as error:
            errors.append(type(error).__name__)
    return found, errors

def library_frames():
    import collections, traceback, warnings
    torch.manual_seed(0)  # formats the stack through sys._getframe inside torch
    Point = collections.namedtuple("Point", "x y")  # asks for the caller's frame
    warnings.warn("fine")
    try:
        raise ValueError("x")
    except ValueError:
        text = traceback.format_exc()
    return Point.__name__, len(Point(1, 2)) + ("ValueError" in text)

def walk_frames():
    import traceback
    return next(traceback.walk_stack(None))[0].f_locals

def many_threads():
    torch.set_num_threads(4)
    x = torch.randn(512, 512)
    return (x @ x).shape[0]

def gc_walk():
    import gc
    return len(gc.get_objects())

def frames():
    import sys
    return sys._getframe(1).f_locals

def frame_via_traceback():
    try:
        raise ValueError
    except ValueError as error:
        return error.__traceback__.tb_frame.f_back.f_locals

def chdir_write(folder):
    os.chdir(folder)
    with open("pwned.txt", "w") as f:
        f.write("x")

def sqlite(path):
    import sqlite3
    sqlite3.connect(path).execute("create table t (x)")

def raise_limits():
    resource.setrlimit(resource.RLIMIT_CPU, (10**6, 10**6))

def fifo():
    os.mkfifo("pipe")

def fork_exec_daemon():
    # a fresh copy of the extension module: its fork_exec was never replaced
    import importlib.util
    fresh = importlib.util.module_from_spec(importlib.util.find_spec("_posixsubprocess"))
    spec = importlib.util.find_spec("_posixsubprocess")
    spec.loader.exec_module(fresh)
    r, w = os.pipe()
    return fresh.fork_exec([b"/bin/sleep", b"307"], [b"/bin/sleep"], True, (), None, None,
                           -1, -1, -1, -1, -1, -1, r, w, True, True, -1, None, None, None,
                           -1, None, False)

def persist(path, text):
    with open(path, "w") as f:
        f.write(text)

def environ_block():
    return open("/proc/self/environ", "rb").read()

def compile_as_library():
    exec(compile("x = 1", os.__file__, "exec"))  # a library's file name for the student's code

def uses_undefined(x):
    return plt.plot(x)  # the set-up cell's plt, missing: a NameError inside the student's code

def fill_(x, mask=None, value=0.0):
    if mask is not None:
        x[mask] = value  # in place: what "do not modify the input" forbids
    return x.sum()

def pop_last(ids, options):
    options["seen"] = True
    return ids.pop()

def restore(x):
    x.add_(1.0)
    x.sub_(1.0)  # changed and put back: the input is as it was
    return x.clone()

def nan_to_zero(x, *rest):
    x.nan_to_num_(0.0)
    return len(rest)

class Scale(nn.Module):
    def forward(self, x):
        x.mul_(2.0)
        return x

def map_file(path):
    out = []
    for route in (
        lambda: torch.from_file(path, shared=False, size=4, dtype=torch.uint8),
        lambda: torch._C._VariableFunctions.from_file(path, size=4, dtype=torch.uint8),
        lambda: torch.ops.aten.from_file(path, size=4, dtype=torch.uint8),
        lambda: torch.UntypedStorage.from_file(path, True, 4),
        lambda: torch._C.StorageBase.from_file(path, False, 4),
        lambda: torch.ByteStorage.from_file(path, False, 4),
    ):
        try:
            out.append("mapped: " + str(route())[:40])
        except Exception as error:
            out.append(type(error).__name__ + ": " + str(error)[:80])
    return out

def checkpoint(outside):
    torch.save({"w": torch.ones(2)}, "model.pt")
    back = torch.load("model.pt")["w"].sum().item()
    try:
        torch._C.PyTorchFileWriter(outside)
        return back, "written"
    except Exception as error:
        return back, type(error).__name__

def pop_and_restore(q):
    C = torch._C
    pop = getattr(C, "_pop_torch_" + "dispatch_stack")
    push = getattr(C, "_push_on_torch_" + "dispatch_stack")
    modes = [pop(None) for _ in range(getattr(C, "_len_torch_" + "dispatch_stack")())]
    out = q.softmax(-1) @ q  # unwatched at the aten level while the modes are off
    for mode in reversed(modes):
        push(mode)
    return out

def leave_a_mode():
    torch.overrides.TorchFunctionMode().__enter__()  # never left: every later call runs under it
    return 1

def default_device():
    torch.set_default_device("cpu")  # torch's own mode: not tampering
    return torch.ones(1).device.type

def access(paths):
    return {p: [os.access(p, m) for m in (os.R_OK, os.W_OK, os.X_OK)] for p in paths}

def capabilities():
    with open("/proc/self/status") as f:
        return {k: v.strip() for k, v in (l.split(":", 1) for l in f) if k.startswith("Cap")}
"""


def _interpreter_reachable_by_others() -> None:
    """In the zygote, before it starts (fallback tests only): where Python is installed under a
    folder other users cannot traverse (``/root/.pyenv`` here; Gradescope's is in ``/usr``), a
    private mount namespace covers that folder with a traversable tmpfs holding the install
    again, so that a worker with a uid of its own reads the interpreter as it would on a host."""
    path = os.path.realpath(sys.base_prefix)
    parts = path.split("/")
    for i in range(2, len(parts)):
        folder, child = "/".join(parts[:i]), "/".join(parts[: i + 1])
        if os.stat(folder).st_mode & 0o001:
            continue
        namespaces = zygote_module.namespaces
        namespaces.unshare(namespaces.CLONE_NEWNS)
        namespaces.mount("none", "/", None, namespaces.MS_REC | namespaces.MS_PRIVATE, None)
        held = os.open(child, os.O_PATH | os.O_CLOEXEC)
        namespaces.mount("tmpfs", folder, "tmpfs", 0, "size=1m,mode=711")
        namespaces._bind(held, child, readonly=True)
        return


@pytest.fixture(scope="session", params=["auto", "fallback"])
def zygote(request, tmp_path_factory):
    secret = tmp_path_factory.mktemp("hidden")
    (secret / "test_hidden.py").write_text("SECRET = 'CANARY-SANDBOX'\n")
    scratch = tempfile.mkdtemp(prefix="ag-scratch-test-")  # workers' uids reach it (not 0700)
    os.environ["AUTOGRADER_TEST_SECRET"] = "do-not-leak"
    if request.param == "auto" and not zygote_module.namespaces.available():
        pytest.skip("no namespaces here: auto mode refuses (see test_grader_hardening.py)")
    results = tmp_path_factory.mktemp("results")
    (results / "results.json").write_text("{}")
    os.chmod(results, 0o755)  # as the grader creates it: open to others until protected
    claimed = zygote_module.claim_uid_block() if os.geteuid() == 0 else None  # both modes
    config = {
        "mode": request.param,
        "hide": [str(secret)],
        "protect": [str(results)],
        "prepare": _interpreter_reachable_by_others if request.param == "fallback" else None,
        "limits": {"cpu": 30},
        "uid_base": claimed[0] if claimed else None,
        "scratch": str(scratch),
        "preimport": [m for m in zygote_module.PREIMPORTS if m != "torch._dynamo"],  # faster start
    }
    pid, sock = zygote_module.start_zygote(config)
    sock.settimeout(120)
    ready = protocol.recv(sock)
    sock.settimeout(None)
    os.environ.pop("AUTOGRADER_TEST_SECRET")
    yield {
        "client": proxy.ZygoteClient(sock), "report": ready["report"], "secret": secret,
        "results": results,
    }  # fmt: skip
    sock.close()
    os.waitpid(pid, 0)
    shutil.rmtree(scratch, ignore_errors=True)
    if claimed:
        os.close(claimed[1])


@pytest.fixture
def student(zygote):
    state = proxy.TestState(seed=1, timeout=5.0)
    session = proxy.WorkerSession(
        zygote["client"], [("cell 1", CODE, list(range(len(ast.parse(CODE).body))))], state=state,
        deadline=time.monotonic() + 120,
    )  # fmt: skip
    yield proxy.Student(session), state, zygote
    session.close()


def test_report_says_which_containment_is_used(zygote):
    report = zygote["report"]
    if report["net_ns"]:
        assert report["network"].startswith("network namespace")
    else:
        assert report["network"].startswith("socket creation blocked")
    assert report["filesystem"] and report["uid"]


def test_worker_is_contained(student):
    st, _, zygote = student
    facts = st.facts()
    assert "AUTOGRADER_TEST_SECRET" not in facts["env"] and set(facts["env"]) <= {
        "PATH", "HOME", "TMPDIR", "LANG", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MPLBACKEND",
        "PYTHONDONTWRITEBYTECODE",
    }  # fmt: skip
    assert facts["files"] == ["submission.py"] and facts["sid"]
    assert facts["limits"]["RLIMIT_AS"] >= 4 * 1024**3
    assert facts["limits"]["RLIMIT_CPU"] == 30
    assert 0 < facts["limits"]["RLIMIT_FSIZE"] < 2**40
    if zygote["report"]["use_uid"]:
        assert facts["uid"] >= zygote_module.UID_FIRST and facts["limits"]["RLIMIT_NPROC"] <= 64
    if zygote["report"]["mount_ns"]:
        assert facts["cwd"] == "/tmp/submission"


def test_a_root_grader_runs_workers_as_a_uid_of_their_own_in_both_modes(student):
    """Issue 28, section 3: in fallback mode as root (Gradescope: no CAP_SYS_ADMIN) the worker
    ran as root beside the hidden suite; now it drops to a uid of its own, and the suite, the
    grader's package and the results folder are closed to it whatever route it takes (os.access
    has no audit event: this is the kernel's answer, not the audit hook's)."""
    st, _, zygote = student
    if os.geteuid() != 0:
        pytest.skip("not root: fallback keeps the grader's uid (and says so)")
    report = zygote["report"]
    assert report["use_uid"] and "uid from" in report["uid"]
    caps = st.capabilities()
    assert {caps[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")} == {
        "0000000000000000"
    }
    grader_file = os.path.join(zygote_module.PACKAGE_DIR, "host", "grader.py")
    paths = [
        str(zygote["secret"] / "test_hidden.py"), str(zygote["secret"]),
        str(zygote["results"] / "results.json"), str(zygote["results"]), grader_file,
        zygote_module.PACKAGE_DIR,
    ]  # fmt: skip
    seen = st.access(paths)
    assert all(seen[p] == [False, False, False] for p in paths), seen
    assert st.access(["."])["."] == [True, True, True]  # its own work folder
    if not report["mount_ns"]:
        assert "fallback sandbox as root" in report["filesystem"]
        assert str(zygote["results"]) in report["closed"]
        assert os.stat(zygote["results"]).st_mode & 0o007 == 0


def test_files_outside_the_work_folder_are_off_limits(student, tmp_path):
    st, _, zygote = student
    hidden = zygote["secret"] / "test_hidden.py"
    for call in (lambda: st.read(str(hidden)), lambda: st.listdir(str(zygote["secret"]))):
        with pytest.raises(proxy.StudentError) as info:
            call()
        assert "CANARY" not in str(info.value)
    target = tmp_path / "pwned.txt"
    with pytest.raises(proxy.StudentError, match="PermissionError|FileNotFoundError"):
        st.write(str(target))  # refused, or a private /tmp (namespace mode) without the folder
    assert not target.exists()
    assert st.write_here() == "ok"


def test_no_network(student):
    st, _, zygote = student
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    seen = []

    def accept():
        try:
            seen.append(server.accept())
        except OSError:
            pass

    thread = threading.Thread(target=accept)
    thread.start()
    with pytest.raises(proxy.StudentError) as info:
        st.connect(server.getsockname()[1])
    thread.join()
    server.close()
    assert not seen
    if not zygote["report"]["net_ns"]:
        assert "PermissionError" in str(info.value)


def test_no_processes(student):
    st, _, _ = student
    for call in (st.spawn, st.fork):
        with pytest.raises(proxy.StudentError, match="not allowed"):
            call()


def test_a_thread_bomb_is_bounded(student):
    st, _, zygote = student
    with pytest.raises(proxy.StudentError, match="can't start new thread"):
        st.thread_bomb()


def test_a_dead_worker_is_replaced(student):
    st, state, _ = student
    with pytest.raises(proxy.WorkerDied, match="exit code 7"):
        st.die(7)
    assert state.fatal == []  # the plugin turns WorkerDied into a failure of that test only
    assert st.attention(torch.ones(1, 2), torch.ones(1, 2), torch.ones(1, 2)).shape == (1, 2)


def test_a_hung_worker_times_out_and_is_replaced(student):
    st, state, _ = student
    state.timeout = 1.0
    start = time.monotonic()
    with pytest.raises(proxy.CallTimeout, match="did not finish"):
        st.loop()
    assert time.monotonic() - start < 30
    state.timeout = 5.0
    assert st.chatty() == 1


def test_output_is_captured_and_bounded(student):
    st, state, _ = student
    st.chatty()
    text = "".join(state.output)
    assert len(text) < 6000 and "more characters" in text


def test_objects_stay_in_the_worker_and_gradients_come_back(student):
    st, _, _ = student
    net = st.Net(4)
    assert isinstance(net, proxy.Remote) and net.type_name.endswith("Net")
    assert isinstance(st.make_generator(0), proxy.Remote)
    weights = {"lin.weight": torch.eye(4), "lin.bias": torch.zeros(4)}
    net.load_state_dict(weights)
    x = torch.randn(3, 4)
    assert torch.allclose(net(x), x.tanh())
    grads = net.backward(x)
    assert torch.allclose(grads.output, x.tanh())
    assert torch.allclose(grads.inputs[0], 1 - x.tanh() ** 2)
    assert set(grads.params) == {"lin.weight", "lin.bias"}
    assert isinstance(net.get("lin"), proxy.Remote) and net.get("training") is True


def test_forbidden_calls_are_caught_at_dispatch_level(student):
    st, state, _ = student
    q = torch.randn(1, 3, 4)
    state.forbid = expand(["sdpa"])
    with pytest.raises(proxy.ForbiddenCall, match="scaled_dot_product_attention"):
        st.sdpa(q)
    assert state.fatal  # recorded even if a test swallowed the exception
    state.forbid, state.fatal = [], []
    assert st.sdpa(q).shape == q.shape


def test_calls_report_the_arguments_they_modified_in_place(student):
    st, _, _ = student
    x = torch.arange(6.0).reshape(2, 3)
    assert st.fill_.tracked(x).modified == []
    tracked = st.fill_.tracked(x, mask=x > 2)
    assert tracked.modified == ["x"] and tracked.value == 3.0
    assert torch.equal(x, torch.arange(6.0).reshape(2, 3))  # the test's own tensor never changes
    with pytest.raises(proxy.InputModified, match="fill_\\(\\) modified its argument 'x' in place"):
        st.fill_.unmodified(x, x > 2)
    with pytest.raises(AssertionError, match="arguments 'ids', 'options'"):
        st.pop_last.unmodified([1, 2, 3], {"k": 1})
    assert st.pop_last([1, 2, 3], {}) == 3  # a plain call checks nothing
    assert st.restore.unmodified(x).shape == x.shape
    nan = torch.tensor([float("nan"), 1.0])
    assert st.nan_to_zero.tracked(nan.clone(), nan.clone()).modified == ["x"]
    assert st.nan_to_zero.tracked(torch.ones(2), [nan]).modified == []
    scale = st.Scale()
    assert scale.tracked(torch.ones(2)).modified == ["x"]
    with pytest.raises(proxy.InputModified, match="'x'"):
        scale.method("forward").unmodified(torch.ones(2))


def test_file_mappings_are_refused_and_checkpoints_stay_in_the_work_folder(student, tmp_path):
    """Issue 28, section 3: torch.from_file (no audit event) read the hidden suite into
    results.json in fallback mode, and a shared mapping could rewrite the grader's modules."""
    st, _, zygote = student
    secret = str(zygote["secret"] / "test_hidden.py")
    for outcome in st.map_file(secret) + st.map_file("submission.py"):
        assert outcome.startswith("PermissionError") and "from_file" in outcome, outcome
    assert st.checkpoint(str(tmp_path / "planted.pt")) == (2.0, "PermissionError") or (
        zygote["report"]["mount_ns"] and st.checkpoint(str(tmp_path / "planted.pt"))[1] != "written"
    )
    assert not (tmp_path / "planted.pt").exists()


def test_changing_torchs_mode_stacks_fails_the_test_as_tampering(student):
    """Issue 28 (Known limits): popping torch's mode stacks by computed names and pushing them
    back before returning left no trace; a mode left on the stack ran under every later call."""
    st, state, _ = student
    q = torch.randn(2, 3)
    state.forbid = ["aten::_softmax"]
    with pytest.raises(proxy.ForbiddenCall, match="mode stacks were changed by student code"):
        st.pop_and_restore(q)
    state.forbid, state.fatal = [], []
    assert st.default_device() == "cpu"
    with pytest.raises(proxy.ForbiddenCall, match="mode stacks were changed"):
        st.leave_a_mode()
    assert state.fatal


def test_a_mode_pushed_while_loading_fails_every_test(zygote):
    code = "import torch\ntorch.overrides.TorchFunctionMode().__enter__()\ndef f():\n    return 1\n"
    state = proxy.TestState(seed=1, timeout=5.0)
    session = proxy.WorkerSession(
        zygote["client"], [("cell 1", code, [0, 1, 2])], state=state,
        deadline=time.monotonic() + 60,
    )  # fmt: skip
    try:
        with pytest.raises(proxy.LoadFailed, match="mode stacks were changed"):
            proxy.Student(session).f()
    finally:
        session.close()


def test_missing_names_are_reported_clearly(student):
    st, _, _ = student
    with pytest.raises(proxy.MissingDefinition, match="does not define 'nope'"):
        st.nope()
    assert st.has("attention") and not st.has("nope")
    assert st.get("EPS") == 1e-6 and isinstance(st.get("attention"), proxy.Remote)


def test_a_name_error_inside_student_code_is_that_error_with_its_line(student):
    st, _, _ = student
    with pytest.raises(proxy.StudentError, match="NameError: name 'plt' is not defined") as info:
        st.uses_undefined(1)
    assert not isinstance(info.value, proxy.MissingDefinition)
    assert "return plt.plot(x)" in str(info.value) and "line" in str(info.value)


def test_student_code_is_decided_by_path_not_by_the_name_it_was_compiled_under(student):
    st, state, _ = student
    with pytest.raises(proxy.Tampering, match="compiling code under the file name"):
        st.compile_as_library()
    assert state.fatal


def test_library_objects_can_be_built_in_the_worker_and_passed_to_student_code(student):
    st, _, _ = student
    lin = torch.nn.Linear(4, 4)
    remote = st.build("torch.nn.Linear", 4, 4, state_dict=lin.state_dict())
    x = torch.randn(2, 4)
    assert torch.allclose(remote(x), lin(x).detach(), atol=1e-6)
    net = st.Net(4)
    net.load_state_dict({"lin.weight": torch.eye(4), "lin.bias": torch.zeros(4)})
    assert torch.allclose(st.apply(net, x), x.tanh())


# -- attacks (issue 13): each was possible before the hardening ------------------------------------


def test_threads_are_refused_so_forbidden_calls_cannot_hide_in_one(student):
    st, state, zygote = student
    state.forbid = expand(["sdpa"])
    with pytest.raises(proxy.StudentError, match="can't start new thread"):
        st.sdpa_in_thread(torch.randn(1, 3, 4))
    state.forbid = []
    with pytest.raises((proxy.StudentError, proxy.Tampering), match="thread"):
        st.raw_thread()  # a fresh copy of _thread: refused (and by the kernel with a uid)


def test_the_grader_cannot_be_imported_or_walked_to(student):
    st, state, _ = student
    for call in (st.grader_modules, st.gc_walk, st.frames, st.frame_via_traceback):
        state.fatal = []
        with pytest.raises(proxy.Tampering, match="tampering"):  # refused, then reported
            call()
        assert state.fatal
    state.fatal = []
    with pytest.raises(proxy.StudentError, match="frame introspection"):
        st.walk_frames()  # a library function that would hand frames out
    assert st.attention(torch.ones(1, 2), torch.ones(1, 2), torch.ones(1, 2)).shape == (1, 2)


def test_library_frame_use_is_not_tampering(student):
    st, state, _ = student
    assert st.library_frames() == ("Point", 3)
    assert st.many_threads() == 512  # asking torch for threads is ignored, not fatal
    assert state.fatal == []


def test_forged_replies_fail_the_test_as_tampering(student):
    st, state, _ = student
    session = st._session
    session._start()
    protocol.send(session.sock, {"op": "ping"})  # a stray request: its reply arrives unasked
    with pytest.raises(proxy.Tampering):
        st.attention(torch.ones(1, 2), torch.ones(1, 2), torch.ones(1, 2))
    assert state.fatal and "tampering" in state.fatal[-1]


def test_audit_hook_holes_are_closed(student, tmp_path):
    st, _, _ = student
    outside = tmp_path / "chdir"
    outside.mkdir()
    calls = (
        lambda: st.chdir_write(str(outside)),
        lambda: st.chdir_write("/"),
        lambda: st.sqlite("notes.db"),
        st.fifo,
        st.environ_block,
        st.raise_limits,
    )
    for call in calls:
        with pytest.raises(proxy.StudentError, match="PermissionError|not allowed|FileNotFound"):
            call()
    assert not (outside / "pwned.txt").exists()


def test_no_process_survives_the_worker(student):
    st, _, zygote = student
    try:
        st.fork_exec_daemon()
    except proxy.StudentError:
        pass  # refused: by the kernel (one task per uid) where the worker has its own uid
    st._session.close()
    time.sleep(0.3)
    survivors = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if f.read().startswith(b"/bin/sleep\x00307"):
                    survivors.append(entry)
        except OSError:
            continue
    assert survivors == []


def test_tmp_folders_are_private_to_each_worker(student):
    st, _, zygote = student
    if not zygote["report"]["mount_ns"]:
        with pytest.raises(proxy.StudentError, match="PermissionError"):
            st.persist("/var/tmp/ag-persist.txt", "from student 1")
        return
    for path in ("/var/tmp/ag-persist.txt", "/dev/shm/ag-persist.txt", "/tmp/ag-persist.txt"):
        st.persist(path, "from student 1")
        st._session.close()  # the next student's worker
        with pytest.raises(proxy.StudentError, match="FileNotFoundError"):
            st.read(path)
        assert not os.path.exists(path)  # nothing reached the host


def test_only_the_allowlist_is_readable(student, tmp_path):
    st, _, zygote = student
    if not zygote["report"]["mount_ns"]:
        pytest.skip("fallback mode only hides the folders it is told about (and says so)")
    secret = tmp_path / "other_student.txt"
    secret.write_text("CANARY-OTHER")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for path in (
        str(secret),
        os.path.join(repo, ".git", "HEAD"),
        os.path.join(repo, "README.md"),
        os.path.join(repo, "autograder", "forbid.py"),
        "/etc/shadow",
        "/root/.bashrc",
    ):
        with pytest.raises(proxy.StudentError) as info:
            st.read(path)
        assert "CANARY" not in str(info.value) and "Error" in str(info.value)
    assert st.read(torch.__file__).startswith("\n") or "torch" in st.read(torch.__file__)
    if zygote["report"]["use_uid"]:
        caps = st.capabilities()
        assert {caps[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")} == {
            "0000000000000000"
        }


def test_the_library_works_but_its_source_is_unreadable(student):
    """Student code uses the loaded library but cannot read (and print into its feedback) the
    source files."""
    import course_lib.layers

    st, _, _ = student
    assert st.library_source() == "usable, source unreadable: 4"
    with pytest.raises(proxy.StudentError) as info:
        st.read(course_lib.layers.__file__)
    assert "LayerNorm" not in str(info.value)


def test_the_inherited_environment_block_is_gone(student):
    st, _, _ = student
    st.attention(torch.ones(1, 2), torch.ones(1, 2), torch.ones(1, 2))
    with open(f"/proc/{st._session.pid}/environ", "rb") as f:  # what the kernel shows for it
        block = f.read()
    assert b"PATH=/" not in block and b"HOME=/root" not in block
