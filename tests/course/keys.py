"""The answer keys beside the hidden suites, for the oracle tests (``test_aN_key.py``).

Each assignment's key (``autograder/suites/<name>/aN_key.py``) and the recorder of its visible
checks' answers (``aN_record.py``) are plain modules in the instructor's tree, not a package:
:func:`load` imports one by path.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITES = ROOT / "autograder" / "suites"
ASSIGNMENTS = sorted(p.parent.name for p in SUITES.glob("*/a*_key.py"))


def load(assignment: str, module: str):
    """``autograder/suites/<assignment>/<module>.py``, imported (and kept in ``sys.modules``: the
    recorders import their key by name)."""
    spec = importlib.util.spec_from_file_location(module, SUITES / assignment / f"{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[module] = loaded
    spec.loader.exec_module(loaded)
    return loaded
