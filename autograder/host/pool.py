"""The pool of warm runner processes (:mod:`autograder.host.runner`) a grading command uses."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from autograder.course.layout import PACKAGE_ROOT, Course
from autograder.host.options import Options

STOP_GRACE = 15.0  # seconds every runner together has to stop (its zygote takes up to 5)
KILL_WAIT = 10.0  # seconds to reap a killed runner


class RunnerPool:
    """``n`` warm runner processes; each serves one command at a time."""

    def __init__(self, n: int, init: dict, run_dir: Path):
        env = dict(os.environ)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = os.pathsep.join(
            [str(PACKAGE_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        )
        env.update(
            PYTHONDONTWRITEBYTECODE="1",
            PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
            OMP_NUM_THREADS="1",
            MKL_NUM_THREADS="1",
            MPLBACKEND="Agg",
        )
        self.procs: list[subprocess.Popen] = []
        self.configs: list[dict] = []
        self.env, self.run_dir = env, run_dir
        self.free: queue.Queue[int] = queue.Queue()
        for i in range(n):
            config = json.loads(json.dumps(init))
            config["log"] = str(run_dir / f"runner{i}.log")
            config["sandbox"]["scratch"] = tempfile.mkdtemp(prefix=f"ag-scratch{i}-")
            config["sandbox"]["log"] = str(run_dir / f"zygote{i}.log")
            self.configs.append(config)
            self.procs.append(self._spawn(config))
        self.report: dict = {}
        for i, proc in enumerate(self.procs):
            line = proc.stdout.readline()
            reply = json.loads(line) if line else {"ready": False, "error": "runner exited"}
            if not reply.get("ready"):
                log = (run_dir / f"runner{i}.log").read_text(errors="replace")[-3000:]
                self.close()
                raise RuntimeError(f"grading runner failed to start: {reply.get('error')}\n{log}")
            self.report = reply["report"]
            self.free.put(i)

    def _spawn(self, config: dict) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-m", "autograder.host.runner"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=self.run_dir,
            env=self.env,
            start_new_session=True,  # its process group: a runner and its children killed at once
        )
        proc.stdin.write(json.dumps(config) + "\n")
        proc.stdin.flush()
        return proc

    def _restart(self, i: int) -> None:
        """Replace a runner that died, so that one submission costs only its own row."""
        old = self.procs[i]
        _kill_group(old)
        try:
            old.wait(timeout=KILL_WAIT)
        except subprocess.TimeoutExpired:
            pass
        for pipe in (old.stdin, old.stdout):
            try:
                pipe.close()
            except (OSError, ValueError):
                pass
        proc = self._spawn(self.configs[i])
        line = proc.stdout.readline()
        if not (line and json.loads(line).get("ready")):
            raise RuntimeError("a grading runner died and could not be restarted")
        self.procs[i] = proc

    def call(self, cmd: dict) -> dict:
        i = self.free.get()
        try:
            proc = self.procs[i]
            try:
                proc.stdin.write(json.dumps(cmd) + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
            except (OSError, ValueError):
                line = ""
            if not line:
                self._restart(i)
                return {"error": "the grading runner exited unexpectedly"}
            return json.loads(line)
        finally:
            self.free.put(i)

    def close(self, grace: float = STOP_GRACE) -> None:
        """Ask every runner to stop; one that has not exited ``grace`` seconds later is killed
        with its process group. Bounded: nothing here waits without a timeout (a runner that
        cannot be reaped is left to init and said on stderr)."""
        for proc in self.procs:
            try:
                proc.stdin.write(json.dumps({"op": "stop"}) + "\n")
                proc.stdin.flush()
            except (OSError, ValueError):
                pass
            try:
                proc.stdin.close()
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + grace
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                try:
                    proc.wait(timeout=KILL_WAIT)
                except subprocess.TimeoutExpired:
                    print(f"grader fault: runner {proc.pid} could not be reaped", file=sys.stderr)
            try:
                proc.stdout.close()
            except (OSError, ValueError):
                pass

    def kill(self) -> None:
        """Kill every runner and its process group now (the command's watchdog)."""
        for proc in self.procs:
            _kill_group(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL a runner and its process group (its runner children), while the runner is not
    reaped yet (its pid then still names the group)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        proc.kill()
    except OSError:
        pass


class Runners:
    """A working folder and a pool of warm runners, shared by the Graders of one command."""

    def __init__(self, course: Course, options: Options, hide: list[Path]):
        self.course, self.options, self.hide = course, options, hide
        self.run_dir: Path | None = None
        self.pool: RunnerPool | None = None

    def __enter__(self) -> Runners:
        self.run_dir = Path(tempfile.mkdtemp(prefix="autograder-run-"))
        ini = self.run_dir / "pytest.ini"
        ini.write_text("[pytest]\n")
        hidden = self.course.hidden_paths(self.run_dir, *self.hide)
        protected = [PACKAGE_ROOT, Path(sys.prefix), Path(sys.base_prefix), Path.cwd()]
        hidden = [h for h in hidden if not any(_is_ancestor(Path(h), p) for p in protected)]
        o = self.options
        init = {
            "ini": str(ini),
            "sandbox": {
                "mode": o.sandbox,
                "hide": hidden,
                # fallback as root: closed to the workers' uids (namespaces hide them instead)
                "protect": [
                    *self.course.hidden_paths(self.run_dir, *self.hide),
                    str(PACKAGE_ROOT / "autograder"),
                    str(self.course.root),
                ],  # fmt: skip
                "limits": {"cpu": o.cpu, "address_space": int(max(4.0, o.memory_gib) * 1024**3)},
            },
        }
        try:
            self.pool = RunnerPool(max(1, o.jobs), init, self.run_dir)
        except BaseException:
            self.__exit__()
            raise
        return self

    def log(self) -> str:
        logs = sorted(self.run_dir.glob("runner*.log")) if self.run_dir else []
        return "\n".join(p.read_text(errors="replace")[-2000:] for p in logs)

    def kill(self) -> None:
        if self.pool is not None:
            self.pool.kill()

    def __exit__(self, *exc: Any) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if self.run_dir is not None and not os.environ.get("AUTOGRADER_KEEP_RUN"):
            shutil.rmtree(self.run_dir, ignore_errors=True)


def _is_ancestor(hidden: Path, path: Path) -> bool:
    try:
        path.resolve().relative_to(hidden.resolve())
        return True
    except ValueError:
        return False
