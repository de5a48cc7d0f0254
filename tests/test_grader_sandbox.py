"""The sandbox itself: a zygote and its workers, driven through the trusted proxy API.

Each test runs against two zygotes: ``auto`` (network and mount namespaces and a per-worker uid
where the system permits; as root here and in CI they are) and ``fallback`` (what an unprivileged
user gets: socket creation blocked, file access policed by an audit hook).
"""

from __future__ import annotations

import ast
import os
import socket
import threading
import time

import pytest
import torch

from autograder import protocol, proxy, sandbox
from autograder.forbid import expand

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
"""


@pytest.fixture(scope="session", params=["auto", "fallback"])
def zygote(request, tmp_path_factory):
    secret = tmp_path_factory.mktemp("hidden")
    (secret / "test_hidden.py").write_text("SECRET = 'CANARY-SANDBOX'\n")
    scratch = tmp_path_factory.mktemp("scratch")
    os.environ["AUTOGRADER_TEST_SECRET"] = "do-not-leak"
    claimed = sandbox.claim_uid_block() if request.param == "auto" and os.geteuid() == 0 else None
    config = {
        "mode": request.param,
        "hide": [str(secret)],
        "limits": {"cpu": 30},
        "uid_base": claimed[0] if claimed else None,
        "scratch": str(scratch),
        "preimport": [m for m in sandbox.PREIMPORTS if m != "torch._dynamo"],  # faster start
    }
    pid, sock = sandbox.start_zygote(config)
    sock.settimeout(120)
    ready = protocol.recv(sock)
    sock.settimeout(None)
    os.environ.pop("AUTOGRADER_TEST_SECRET")
    yield {"client": proxy.ZygoteClient(sock), "report": ready["report"], "secret": secret}
    sock.close()
    os.waitpid(pid, 0)
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
        assert facts["uid"] >= sandbox.UID_FIRST and facts["limits"]["RLIMIT_NPROC"] <= 64
        assert facts["cwd"] == "/tmp/submission"


def test_files_outside_the_work_folder_are_off_limits(student, tmp_path):
    st, _, zygote = student
    hidden = zygote["secret"] / "test_hidden.py"
    for call in (lambda: st.read(str(hidden)), lambda: st.listdir(str(zygote["secret"]))):
        with pytest.raises(proxy.StudentError) as info:
            call()
        assert "CANARY" not in str(info.value)
    target = tmp_path / "pwned.txt"
    with pytest.raises(proxy.StudentError, match="PermissionError"):
        st.write(str(target))
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


def test_missing_names_are_reported_clearly(student):
    st, _, _ = student
    with pytest.raises(proxy.MissingDefinition, match="does not define 'nope'"):
        st.nope()
    assert st.has("attention") and not st.has("nope")
    assert st.get("EPS") == 1e-6 and isinstance(st.get("attention"), proxy.Remote)


def test_library_objects_can_be_built_in_the_worker_and_passed_to_student_code(student):
    st, _, _ = student
    lin = torch.nn.Linear(4, 4)
    remote = st.build("torch.nn.Linear", 4, 4, state_dict=lin.state_dict())
    x = torch.randn(2, 4)
    assert torch.allclose(remote(x), lin(x).detach(), atol=1e-6)
    net = st.Net(4)
    net.load_state_dict({"lin.weight": torch.eye(4), "lin.bias": torch.zeros(4)})
    assert torch.allclose(st.apply(net, x), x.tanh())
