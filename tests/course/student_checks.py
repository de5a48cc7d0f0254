"""Run a notebook's visible checks the way a student's kernel would, and report each one as JSON.

    python tests/course/student_checks.py NOTEBOOK.ipynb

Runs, in order, the definitions of every code cell (imports, functions, classes, constants; not
training runs) and the ``check_*`` calls of every check cell, then prints one JSON list:
``{"cell": grade_id, "status": "passed" | "failed" | "crashed" | "skipped", "message": ...}``.
``failed`` is a :class:`~course_lib.checks.CheckFailed` (the check's own diagnosis); ``crashed`` is
any other exception; ``skipped`` a check whose arguments come from a training run. Standalone (no
``autograder`` import): test_embargo.py runs it in a virtual environment with the bundle's wheel.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import sys


def _keep(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Import | ast.ImportFrom | ast.FunctionDef | ast.ClassDef):
        return True
    if isinstance(stmt, ast.Assign):
        return all(isinstance(t, ast.Name) for t in stmt.targets) and isinstance(
            stmt.value, ast.Constant | ast.Tuple | ast.Name | ast.Attribute | ast.UnaryOp
        )
    return False


def _check_call(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Name)
        and stmt.value.func.id.startswith("check_")
    )


def run(path: str) -> list[dict]:
    from course_lib.checks import CheckFailed

    notebook = json.loads(open(path, encoding="utf-8").read())
    namespace: dict = {"__name__": "__main__"}
    results = []
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        grade = bool(meta.get("grade")) and not meta.get("solution")
        try:
            tree = ast.parse("".join(cell["source"]))
        except SyntaxError:
            continue
        for stmt in tree.body:
            is_check = grade and _check_call(stmt)
            if not (is_check or _keep(stmt)):
                continue
            code = compile(ast.Module(body=[stmt], type_ignores=[]), path, "exec")
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    exec(code, namespace)  # noqa: S102 (the course's own notebook)
                status, message = "passed", out.getvalue().strip()
            except CheckFailed as error:
                status, message = "failed", str(error)
            except NameError as error:
                status, message = "skipped", str(error)
            except Exception as error:  # noqa: BLE001 (reported)
                status, message = "crashed", f"{type(error).__name__}: {error}"
            if is_check:
                results.append({"cell": meta.get("grade_id"), "status": status, "message": message})
            elif status == "crashed":
                results.append({"cell": "(definitions)", "status": status, "message": message})
    return results


if __name__ == "__main__":
    import matplotlib

    matplotlib.use("Agg")
    print(json.dumps(run(sys.argv[1])))
