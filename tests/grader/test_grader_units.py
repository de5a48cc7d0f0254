"""The grader's trusted-side pieces, in-process: reading, extraction, static scan, wire format,
dispatch-level detection and seeds. No sandbox is started here (see test_grader_sandbox.py)."""

from __future__ import annotations

import io
import json
import os
import pickle

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autograder.course.notebook import (
    Cell,
    CodeChunk,
    NotebookError,
    assemble,
    extract,
    read_notebook,
    review,
    strip_magics,
)
from autograder.host.plugin import derive_seed
from autograder.host.scan import forbidden_hits, scan
from autograder.sandbox.detector import Detector
from autograder.wire import protocol
from autograder.wire.forbid import expand, validate


def _chunk(source: str, origin: str = "student") -> CodeChunk:
    return CodeChunk("cell 1 (x)", source, origin)


def _scan(*sources: str, provided: str = ""):
    chunks = ([_chunk(provided, "release")] if provided else []) + [_chunk(s) for s in sources]
    return scan([extract(c)[0] for c in chunks])


# -- reading -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, needle",
    [
        (b"", "empty"),
        (b'{"cells": [', "invalid JSON at line 1"),
        (b"\x89PNG\r\n\x1a\nrest", "PNG image"),
        (b"%PDF-1.4", "PDF"),
        (b"[1, 2]", "not an object"),
        (json.dumps({"nbformat": 3, "worksheets": []}).encode(), "format 3"),
        (json.dumps({"nbformat": 4}).encode(), "no list of cells"),
    ],
)
def test_unreadable_notebooks_get_a_reason(tmp_path, data, needle):
    path = tmp_path / "nb.ipynb"
    path.write_bytes(data)
    with pytest.raises(NotebookError, match=needle):
        read_notebook(path)
    assert path.read_bytes() == data  # never modified


def test_missing_and_oversized_notebooks(tmp_path):
    with pytest.raises(NotebookError, match="missing"):
        read_notebook(tmp_path / "absent.ipynb")
    big = tmp_path / "big.ipynb"
    big.write_bytes(b"{" + b" " * 2000 + b"}")
    with pytest.raises(NotebookError, match="over the"):
        read_notebook(big, max_bytes=1000)


def test_non_utf8_is_decoded_with_a_note_and_hashed(tmp_path):
    nb = {"nbformat": 4, "cells": [{"cell_type": "code", "source": "x = 'caf\u00e9'"}]}
    raw = json.dumps(nb, ensure_ascii=False).encode().replace("é".encode(), b"\xe9")
    path = tmp_path / "nb.ipynb"
    path.write_bytes(raw)
    result = read_notebook(path)
    assert "not valid UTF-8" in result.notes[0]
    assert result.cells[0].source.startswith("x = 'caf")
    import hashlib

    assert result.sha256 == hashlib.sha256(raw).hexdigest()


# -- matching against the release --------------------------------------------------------------


def _cell(i, source, gid=None, **flags):
    meta = {"grade_id": gid, **flags} if gid else {}
    return Cell(i, "code", source, meta)


def test_assemble_uses_release_code_for_read_only_cells_and_skips_checks():
    release = [
        _cell(0, "import math", "imports", locked=True),
        _cell(1, "def f():\n    raise NotImplementedError", "f", solution=True),
        _cell(2, "assert f() == 1", "check_f", grade=True, locked=True, points=1),
    ]
    student = [
        _cell(0, "import os  # edited", "imports", locked=True),
        _cell(1, "def f():\n    return 1", "f", solution=True),
        _cell(2, "pass", "check_f", grade=True, locked=True, points=1),
        _cell(3, "def helper():\n    return 2"),
    ]
    chunks, notes = assemble(student, release)
    # only the solution cells' code is graded: an added metadata-less cell is not (reported)
    assert [c.source for c in chunks] == ["import math", "def f():\n    return 1"]
    assert [c.origin for c in chunks] == ["release", "student"]
    assert any("'check_f' was edited" in n for n in notes)
    assert any("'imports' was edited" in n for n in notes)
    assert any("cell 3 holds code that is not part of the assignment" in n for n in notes)
    assert review(student, release) == ["extra code cells not graded: 3"]


def test_assemble_restores_deleted_read_only_cells_and_notes_missing_and_duplicates():
    release = [
        _cell(0, "import math", "imports", locked=True),
        _cell(1, "def f(): ...", "f", solution=True),
        _cell(2, "def g(): ...", "g", solution=True),
        _cell(3, "check()", "check", grade=True, points=1),
    ]
    student = [_cell(0, "def f(): return 1", "f", solution=True)] * 2
    chunks, notes = assemble(student, release)
    assert chunks[0].source == "import math" and chunks[0].origin == "release"
    text = "\n".join(notes)
    assert "'g' is missing" in text and "'check' is missing" in text
    assert "more than once" in text and "'imports' was deleted" in text


# -- extraction -------------------------------------------------------------------------------


def test_extract_keeps_definitions_and_constants_and_drops_the_rest():
    source = "\n".join(
        [
            "import torch",
            "%matplotlib inline",
            "!pip install x",
            "EPS = 1e-6",
            "SIZES = (1, 2)",
            "DEVICE = torch.device('cpu')",
            "act = lambda x: x.relu()",
            "fast = torch.nn.functional.softmax",
            "model = torch.nn.Linear(2, 2)",
            "torch.allclose = lambda *a, **k: True",
            "for _ in range(10**9):",
            "    pass",
            "def f(x):",
            "    return x + EPS",
            "class C:",
            "    pass",
            "if __name__ == '__main__':",
            "    f(1)",
            "try:",
            "    import numpy as np",
            "except ImportError:",
            "    np = None",
        ]
    )
    ex, notes = extract(_chunk(source))
    kept = [type(ex.tree.body[i]).__name__ for i in range(len(ex.tree.body))]
    assert kept == ["Import", "Assign", "Assign", "Assign", "Assign", "Assign",
                    "FunctionDef", "ClassDef", "Try"]  # fmt: skip
    dropped = "\n".join(ex.dropped)
    assert "and 1 more" in notes[0]
    for text in ("model = torch.nn.Linear", "torch.allclose", "for _ in range", "if __name__"):
        assert text in dropped
    assert "pass" in ex.source.split("\n")[1]  # magics become `pass`, line numbers kept


def test_cell_magics_and_syntax_errors():
    assert strip_magics("%%bash\necho hi")[0] is None
    assert strip_magics("%%time\nx = 1")[0] == "\nx = 1"
    ex, notes = extract(_chunk("def f(:\n    pass"))
    assert ex is None and "syntax error at line 1" in notes[0]


# -- static scan ------------------------------------------------------------------------------


def test_scan_resolves_aliases_to_forbidden_calls():
    code = "import torch.nn.functional as F\nfast = F.scaled_dot_product_attention\n"
    code += "def attention(q, k, v):\n    return fast(q, k, v)\n"
    hits = forbidden_hits(_scan(code), ["sdpa"])
    assert hits and "torch.nn.functional.scaled_dot_product_attention" in hits[0]
    hits = forbidden_hits(_scan("from torch import nn\nm = nn.MultiheadAttention"), ["sdpa"])
    assert not hits
    mha = _scan("from torch import nn\ndef f():\n    return nn.MultiheadAttention(4, 2)")
    assert forbidden_hits(mha, ["multihead_attention"])
    ops = _scan(
        "import torch\ndef f(q):\n"
        "    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, q, q)"
    )
    assert forbidden_hits(ops, ["sdpa"])


def test_scan_does_not_flag_a_students_own_function_with_a_forbidden_name():
    code = (
        'def scaled_dot_product_attention(q, k, v):\n    """like scaled_dot_product_attention"""\n'
    )
    code += "    return q\n\ndef g(q):\n    return scaled_dot_product_attention(q, q, q)\n"
    assert not forbidden_hits(_scan(code), ["sdpa", "course_lib"])


def test_scan_flags_module_references_and_getattr_strings():
    result = _scan("from course_lib.attention import scaled_dot_product_attention as ref")
    assert forbidden_hits(result, ["course_lib"])
    result = _scan(
        "import torch\ndef f(q):\n"
        "    return getattr(torch.nn.functional, 'scaled_dot_product_attention')(q, q, q)"
    )
    assert forbidden_hits(result, ["sdpa"])
    result = _scan("def f(self):\n    return getattr(self, 'attention')")
    assert not forbidden_hits(result, ["course_lib", "sdpa"])


def test_scan_reports_tampering_but_not_provided_code():
    for code, needle in [
        ("import torch\ndef f():\n    torch.allclose = lambda *a, **k: True", "torch.allclose"),
        ("def f():\n    import autograder\n    return autograder", "autograder"),
        ("import sys\ndef f():\n    return sys.modules", "sys.modules"),
        ("import torch\ndef f():\n    setattr(torch, 'allclose', None)", "setattr"),
        ("class M:\n    def __torch_function__(self, *a):\n        pass", "__torch_function__"),
        ("def f():\n    return __builtins__", "__builtins__"),
        ("import os\ndef f(fd):\n    os.write(fd, b'x')", "os.write"),
        (
            "def f():\n    try:\n        1 / 0\n    except Exception as e:\n"
            "        return e.__traceback__.tb_frame.f_back",
            "tb_frame",
        ),
    ]:
        assert any(needle in t for t in _scan(code).tampering), code
    provided = "from course_lib.checks import check_close\nimport ctypes"
    assert not _scan("x = 1", provided=provided).tampering
    assert not forbidden_hits(_scan("x = 1", provided=provided), ["course_lib"])


def test_forbid_specs_expand_and_validate():
    assert "aten::*scaled_dot_product*" in expand(["sdpa"])
    assert validate(["sdpa", "torch.nn.MultiheadAttention", "aten::x*"]) == []
    assert validate(["not a name!"])


# -- dispatch-level detection (in-process) -----------------------------------------------------


def test_detector_sees_sdpa_through_any_alias():
    q = torch.randn(1, 2, 3, 4)
    fn = getattr(F, "scaled_dot" + "_product_attention")
    with Detector(expand(["sdpa"])) as d:
        fn(q, q, q)
    assert d.violations and "scaled_dot_product_attention" in d.violations[0]
    with Detector(expand(["sdpa"])) as d:
        torch.softmax(q @ q.transpose(-2, -1), dim=-1) @ q
    assert d.violations == []


def test_detector_sees_multihead_attention_and_python_functions_in_modules():
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(1, 3, 8)
    with Detector(expand(["multihead_attention"])) as d:
        mha(x, x, x)
    assert any("MultiheadAttention" in v for v in d.violations)
    import importlib

    hidden = importlib.import_module("course_" + "lib.checks.attention")
    with Detector(expand(["course_lib"])) as d:
        hidden._attention(x, x, x)
    assert any("course_lib.checks" in v for v in d.violations)


# -- the wire format ---------------------------------------------------------------------------


def test_plain_data_round_trip_and_handles():
    import numpy as np

    class Thing:
        pass

    kept = []

    def keep(obj):
        kept.append(obj)
        return protocol.remote_marker(len(kept), obj)

    big = torch.arange(1000.0)
    value = {"t": big[:3], "n": np.arange(3), "s": np.float32(2.5), "thing": Thing(), "l": [1, "a"]}
    plain = protocol.to_plain(value, keep)
    back = protocol.loads(protocol.dumps(plain))
    assert back["t"].untyped_storage().nbytes() == 3 * 4  # views are compacted
    assert torch.equal(back["n"], torch.arange(3)) and back["s"] == 2.5
    assert protocol.is_remote_marker(back["thing"]) and kept == [value["thing"]]


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_arbitrary_pickles_are_refused():
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    buffer = io.BytesIO()
    pickle.dump(Evil(), buffer)
    with pytest.raises(protocol.ProtocolError):
        protocol.loads(buffer.getvalue())
    buffer = io.BytesIO()
    torch.save({"x": Evil()}, buffer)
    with pytest.raises(protocol.ProtocolError):
        protocol.loads(buffer.getvalue())


def test_seeds_depend_on_assignment_student_and_test_only():
    a = derive_seed("", "a1", "alice", "test_x.py::test_y")
    assert a == derive_seed("", "a1", "alice", "test_x.py::test_y")
    others = {
        derive_seed("", "a1", "bob", "test_x.py::test_y"),
        derive_seed("", "a2", "alice", "test_x.py::test_y"),
        derive_seed("", "a1", "alice", "test_x.py::test_z"),
        derive_seed("salt", "a1", "alice", "test_x.py::test_y"),
    }
    assert a not in others and len(others) == 4


def test_configuration_and_ordinary_calls_are_not_tampering():
    code = "import torch, gc\nimport matplotlib.pyplot as plt\nimport os\n"
    code += "def setup():\n    torch.backends.cudnn.deterministic = True\n"
    code += "    plt.rcParams['figure.figsize'] = (4, 3)\n    os.environ['X'] = '1'\n"
    code += "    gc.collect()\n    torch.manual_seed(0)\n"
    assert _scan(code).tampering == []
    assert _scan("import gc\ndef f():\n    return gc.get_objects()").tampering


# -- hostile notebooks and outputs (issue 13) -------------------------------------------------


def _nb_bytes(cells, **extra) -> bytes:
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells,
                       **extra}).encode()  # fmt: skip


def test_hostile_metadata_and_numbers_are_read_with_notes(tmp_path):
    path = tmp_path / "nb.ipynb"
    cells = [
        {"cell_type": "markdown", "source": "x", "metadata": {"nbgrader": {"grade_id": ["a"]}}},
        {"cell_type": "code", "source": "def f():\n    return '\ud800'", "outputs": [],
         "execution_count": 0, "metadata": {"nbgrader": {"grade_id": "f", "solution": "yes"}}},
    ]  # fmt: skip
    raw = _nb_bytes(cells).replace(b'"execution_count": 0', b'"execution_count": ' + b"7" * 5000)
    path.write_bytes(raw)
    read = read_notebook(path)
    assert "grade_id is not text" in read.notes[0]
    assert read.cells[0].nbgrader == {}
    assert read.cells[1].nbgrader == {"grade_id": "f"}  # "yes" is not True
    assert "\ufffd" in read.cells[1].source
    read.cells[1].source.encode("utf-8")  # no lone surrogate left


def test_links_and_special_files_are_refused(tmp_path):
    target = tmp_path / "secret.ipynb"
    target.write_bytes(_nb_bytes([]))
    link = tmp_path / "link.ipynb"
    link.symlink_to(target)
    with pytest.raises(NotebookError, match="symbolic link"):
        read_notebook(link)
    fifo = tmp_path / "fifo.ipynb"
    os.mkfifo(fifo)
    with pytest.raises(NotebookError, match="not a regular file"):
        read_notebook(fifo)  # and does not block


def test_assemble_grades_release_order_and_reports_retyped_and_duplicated_cells():
    release = [
        _cell(0, "def f(): ...", "f", solution=True),
        _cell(1, "def g(): ...", "g", solution=True),
    ]
    student = [
        Cell(0, "markdown", "def f(): return 1", {"grade_id": "f", "solution": True}),
        _cell(1, "def g(): return 2", "g", solution=True),
        _cell(2, "def g(): return 3", "g", solution=True),
        _cell(3, "# just a comment"),
    ]
    chunks, notes = assemble(student, release)
    assert [c.source for c in chunks] == ["def g(): return 2"]
    assert any("changed from a code cell to markdown" in n for n in notes)
    assert review(student, release) == ["duplicated grade_id: g", "changed cell type: f"]


def test_student_ids_map_to_unique_safe_folders(tmp_path):
    from autograder.host.intake import discover, safe_name

    assert safe_name("kim_lee") == "kim_lee"
    assert safe_name("kim lee") != safe_name("kim_lee")
    assert safe_name("kim lee").startswith("kim_lee-")
    assert safe_name("..") not in (".", "..") and "/" not in safe_name("../x")
    for name in ("kim lee", "kim_lee", "Kim_Lee"):
        (tmp_path / f"{name}.ipynb").write_bytes(_nb_bytes([]))
    subs = discover(tmp_path, "a", ["a.ipynb"])
    ids = [s.id for s in subs]
    assert len({i.lower() for i in ids}) == 3, ids


def test_mixed_layouts_and_non_submissions_each_get_an_entry(tmp_path):
    from autograder.host.intake import discover

    (tmp_path / "alice").mkdir()
    (tmp_path / "alice" / "a.ipynb").write_bytes(_nb_bytes([]))
    (tmp_path / "bob" / "a").mkdir(parents=True)
    (tmp_path / "bob" / "a" / "a.ipynb").write_bytes(_nb_bytes([]))
    (tmp_path / "carol" / "other").mkdir(parents=True)
    (tmp_path / "dave.ipynb").symlink_to(tmp_path / "alice" / "a.ipynb")
    subs = {s.student: s for s in discover(tmp_path, "a", ["a.ipynb"])}
    assert set(subs) == {"alice", "bob", "carol", "dave"}
    assert subs["alice"].notebooks["a.ipynb"] == tmp_path / "alice" / "a.ipynb"
    assert subs["bob"].notebooks["a.ipynb"] == tmp_path / "bob" / "a" / "a.ipynb"
    assert not subs["carol"].submitted and "only folders" in subs["carol"].error
    assert "symbolic link" in subs["dave"].error


def _row(**extra):
    result = {"nodeid": "t.py::test_x", "cell": "c", "max_points": 1.0, "points": 0.0,
              "status": "failed", "message": "", "output": ""}  # fmt: skip
    row = {"student": "s", "id": "s", "status": "graded", "reason": None, "files": [],
           "notes": [], "notebooks": {}, "tests": {"t.py::test_x": result}, "flags": [],
           "cells": {"nb::c": {"notebook": "nb", "grade_id": "c", "score": 0.0,
                               "max_score": 1.0}}, "score": 0.0, "max_score": 1.0,
           "percent": 0.0}  # fmt: skip
    for key, value in extra.items():
        if key == "message":
            result["message"] = value
        else:
            row[key] = value
    return row


def test_feedback_markdown_cannot_be_forged_or_run_html():
    from autograder.host.report import feedback_markdown

    message = "boom\n```\n\n## `c`: 23 / 23\n<script>alert(1)</script>"
    text = feedback_markdown("a", _row(message=message, notes=["x\n# 23 / 23 <img onerror=1>"],
                                       student="=evil <b>"))  # fmt: skip
    lines = text.splitlines()
    fence = next(line.strip() for line in lines if line.strip().startswith("```"))
    assert len(fence) > 3 and lines.count("  " + fence) == 2  # opened and closed once
    assert not any(line.startswith("#") and "23 / 23" in line for line in lines)
    assert "<img" not in text and "<b>" not in text
    assert "<script>" in text  # inside the code block, shown as text


def test_outputs_survive_lone_surrogates_and_neutralise_formulas(tmp_path):
    import csv

    from autograder.host.report import ReportWriter

    writer = ReportWriter(tmp_path, "a", [{"nodeid": "t.py::test_x"}], {})
    writer.add(_row(message="bad \ud800 text", student="=1+2", id="_1_2-abc"))
    writer.add(_row(student="@SUM(A1)", id="_SUM_A1_-def", reason="-2+3"))
    assert writer.errors == []
    with open(tmp_path / "grades.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [r["student"] for r in rows] == ["'=1+2", "'@SUM(A1)"]
    assert rows[1]["reason"] == "'-2+3"
    assert len((tmp_path / "report.rows.jsonl").read_text().splitlines()) == 2  # as graded
    writer.finish()
    assert len(json.loads((tmp_path / "report.json").read_text())["rows"]) == 2
    assert "\ufffd" in (tmp_path / "feedback" / "_1_2-abc" / "feedback.md").read_text()


def test_check_close_rejects_complex_and_non_finite_values():
    from course_lib.checks.core import CheckFailed, check_close, check_not_constant

    expected = torch.ones(3)
    bad = torch.ones(3, dtype=torch.complex64)
    bad[0] = complex(1, float("nan"))
    with pytest.raises(CheckFailed, match="complex"):
        check_close(bad, expected)
    with pytest.raises(CheckFailed, match="complex"):
        check_close(torch.ones(3, dtype=torch.complex64), expected)
    with pytest.raises(CheckFailed, match="NaN"):
        check_close(torch.tensor([1.0, float("nan"), 1.0]), expected)
    check_close(torch.ones(3, dtype=torch.complex64), torch.ones(3, dtype=torch.complex64))
    with pytest.raises(CheckFailed, match="the same everywhere"):
        check_not_constant(torch.zeros(2, 3))
    check_not_constant(torch.arange(3.0))


def test_student_markdown_is_made_inert():
    import re

    from autograder.integrations.gradebook import inert_markdown

    text = inert_markdown("<img src=x onerror=1> [b](javascript:x) [c](JAVA\nscript:y) &#106;")
    assert "<img" not in text and "&#106;" not in text and "&amp;#106;" in text
    assert not re.search(r"(?i)script:", text)


def test_a_grader_fault_costs_one_row_and_rows_arrive_as_graded(tmp_path):
    from autograder.host.grader import Grader, Row
    from autograder.host.intake import Submission, safe_name
    from autograder.host.options import Options

    grader = object.__new__(Grader)
    grader.manifest = {"tests": [{"nodeid": "t.py::a", "cell": "c", "points": 2.0}]}
    grader.release, grader.grade_cells = {"nb.ipynb": []}, {}
    grader.options = Options(jobs=2, progress=False)

    def grade_one(sub, index, names):
        if sub.student == "bad":
            raise KeyError("a bug not met before")
        if names is None:
            return [Row(student=sub.student, id=sub.id, score=1.0)]
        return [Row(student=s, id=safe_name(s), score=1.0) for s in names]

    grader._grade_one = grade_one
    subs = [Submission(name, {}, [], tmp_path) for name in ("ok", "bad", "kim lee")]
    seen: list[dict] = []
    rows = grader.grade(subs, on_row=seen.append)
    assert [r["student"] for r in rows] == ["ok", "bad", "kim lee"]
    assert sorted(r["student"] for r in seen) == ["bad", "kim lee", "ok"]
    bad = rows[1]
    assert bad["fault"] == "grader" and bad["status"] == "error" and "KeyError" in bad["reason"]
    assert bad["max_score"] == 2.0 and bad["tests"]["t.py::a"]["points"] == 0
    assert rows[2]["id"].startswith("kim_lee-") and rows[0]["fault"] is None
    # under several names (the tools'): one row per submission and name, in order
    rows = grader.grade(subs, names=["ada", "kim lee"])
    assert [(r["student"], r["fault"]) for r in rows] == [
        ("ada", None), ("kim lee", None), ("ada", "grader"), ("kim lee", "grader"),
        ("ada", None), ("kim lee", None),
    ]  # fmt: skip
    assert rows[3]["id"].startswith("kim_lee-")


def test_forbidding_a_decorated_function_leaves_the_decorator_alone():
    """`@torch.no_grad()` wraps every function in one shared code object: forbidding a decorated
    reference must not flag a student's own decorated function."""
    import torch

    from autograder.sandbox.detector import _own_codes

    @torch.no_grad()
    def reference(x):
        return x

    @torch.no_grad()
    def students(x):
        return x

    codes = _own_codes(reference)
    assert reference.__wrapped__.__code__ in codes
    assert students.__code__ not in codes and students.__wrapped__.__code__ not in codes
