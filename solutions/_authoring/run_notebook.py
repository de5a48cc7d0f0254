"""Execute a notebook top to bottom and report every cell's time (the assignments' budget check).

    python solutions/_authoring/run_notebook.py solutions/a1_rnn_attention/a1_rnn_attention.ipynb

Prints the slowest cells with their wall time and the kernel's CPU time, the totals, and fails if
a cell raised. The budget is about an idle 2-core machine: on a machine shared with other jobs
the wall time overstates it, and the CPU time (the notebook sets torch to one thread) is the
better estimate. ``--save OUT.ipynb`` keeps the executed notebook.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

PROBE = """
import resource as _resource, time as _time
_budget_log = []
def _budget_pre(*_):
    global _budget_start
    u = _resource.getrusage(_resource.RUSAGE_SELF)
    _budget_start = (u.ru_utime + u.ru_stime, _time.monotonic())
def _budget_post(*_):
    u = _resource.getrusage(_resource.RUSAGE_SELF)
    cpu, wall = u.ru_utime + u.ru_stime - _budget_start[0], _time.monotonic() - _budget_start[1]
    _budget_log.append((cpu, wall))
get_ipython().events.register("pre_run_cell", _budget_pre)
get_ipython().events.register("post_run_cell", _budget_post)
"""
REPORT = "import json as _json; print(_json.dumps(_budget_log))"


def run(path: Path, save: Path | None = None, timeout: int = 900) -> int:
    nb = nbformat.read(path, as_version=4)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    nb.cells.insert(0, nbformat.v4.new_code_cell(PROBE))
    nb.cells.append(nbformat.v4.new_code_cell(REPORT))
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.monotonic()
    status = 0
    try:
        client.execute()
    except Exception as error:  # noqa: BLE001 (report any failure, then exit non-zero)
        print(f"FAILED: {type(error).__name__}: {str(error)[-3000:]}")
        status = 1
    total = time.monotonic() - start
    try:
        log = json.loads(nb.cells[-1].outputs[0]["text"])
    except (IndexError, KeyError, ValueError):
        log = []
    nb.cells = nb.cells[1:-1]
    rows = [(i, cpu, wall) for i, (cpu, wall) in zip(code, log)]
    for index, cpu, wall in sorted(rows, key=lambda r: -r[1])[:6]:
        cell = nb.cells[index]
        gid = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        first = cell.source.strip().split("\n")[0][:50]
        print(f"  cell {index:3d} {gid:22s} CPU {cpu:6.1f} s  wall {wall:6.1f} s  {first}")
    cpu_total = sum(r[1] for r in rows)
    print(
        f"{path.name}: {len(rows)} code cells; total CPU {cpu_total:.1f} s, wall {total:.1f} s "
        f"(including kernel start); slowest cell CPU {max((r[1] for r in rows), default=0):.1f} s, "
        f"wall {max((r[2] for r in rows), default=0):.1f} s"
    )
    if save:
        nbformat.write(nb, save)
    return status


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--save", type=Path)
    args = parser.parse_args()
    raise SystemExit(run(args.notebook, args.save))
