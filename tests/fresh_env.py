"""A fresh Python environment with only a wheel of the course library, and notebooks run in it.

What a reader gets on Colab or a student with the bundle: ``course_lib`` comes from the wheel
(never from this repository), its dependencies (torch & co.) from the course's virtual
environment (a ``.pth`` file, so nothing is downloaded). Used by the student-bundle tests and by
the launch-notebook tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from time_limits import scaled

# the repository on PYTHONPATH would shadow the wheel
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def python_with_wheel(wheel: Path, folder: Path) -> Path:
    """A virtual environment in ``folder`` with ``wheel`` installed; its interpreter."""
    subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", "--without-pip", str(folder)],
                   check=True)  # fmt: skip
    python = folder / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    ours = [p for p in sys.path if p.endswith("site-packages")][0]
    Path(site, "_course_dependencies.pth").write_text(ours + "\n", encoding="utf-8")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "--quiet", str(wheel)],
        check=True,
    )  # fmt: skip
    where = subprocess.run([str(python), "-c", "import course_lib; print(course_lib.__file__)"],
                           capture_output=True, text=True, check=True, cwd=folder,
                           env=ENV).stdout  # fmt: skip
    assert where.startswith(str(folder)), f"course_lib comes from {where}, not the wheel"
    return python


def run_notebook(
    python: Path, kernels: Path, notebook: Path, cwd: Path | None = None
) -> list[tuple[str, str, str]]:
    """Run ``notebook`` top to bottom in a kernel of ``python`` (set JUPYTER_PATH to ``kernels``
    and drop PYTHONPATH first); its errors as (cell's grade id or index, name, value)."""
    import nbformat
    from nbclient import NotebookClient

    spec = kernels / "kernels" / "student"
    spec.mkdir(parents=True, exist_ok=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "student", "language": "python"})
    )
    nb = nbformat.read(notebook, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell("import course_lib; print(course_lib.__file__)"))
    NotebookClient(nb, timeout=int(scaled(900)), kernel_name="student", allow_errors=True,
                   resources={"metadata": {"path": str(cwd or kernels)}}).execute()  # fmt: skip
    assert nb.cells[0].outputs[0]["text"].startswith(str(python.parent.parent))
    return [
        (c.metadata.get("nbgrader", {}).get("grade_id", str(i)), o["ename"], o["evalue"])
        for i, c in enumerate(nb.cells)
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
