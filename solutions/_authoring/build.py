"""Write an assignment's nbgrader source notebook and its sample submissions.

    python solutions/_authoring/build.py a1_rnn_attention [a2_self_attention ...]

Writes ``solutions/<name>/<name>.ipynb`` and ``autograder/samples/<name>/<sample>.ipynb`` plus
``expected.json`` (from the module's ``SAMPLES`` and ``EXPECTED``). Then regenerate the student
release with ``make release`` (``python -m autograder release <name>``).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
RUFF = str(Path(sys.executable).parent / "ruff")
RUFF_TOML = """# A sample with a syntax error on purpose: the grader must still grade the rest.
extend = "../../../../pyproject.toml"
extend-exclude = ["{name}.ipynb"]
"""
sys.path.insert(0, str(HERE))

from nbtools import submission, write_notebook  # noqa: E402


def build(name: str) -> None:
    module = importlib.import_module(name)
    nb = module.build()
    path = ROOT / "solutions" / name / f"{name}.ipynb"
    nb.write(path)
    auto, manual = nb.totals()
    print(f"wrote {path.relative_to(ROOT)}: {auto:g} automatic + {manual:g} manual points")
    samples = ROOT / "autograder" / "samples" / name
    samples.mkdir(parents=True, exist_ok=True)
    written = [path]
    for sample, overrides in module.SAMPLES.items():
        # a sample with a syntax error lives in its own folder, next to a ruff.toml that keeps
        # the linter away from it (the grader ignores files other than the notebook)
        if sample in getattr(module, "UNPARSABLE", ()):
            folder = samples / sample
            write_notebook(submission(nb, overrides), folder / f"{name}.ipynb")
            (folder / "ruff.toml").write_text(RUFF_TOML.format(name=name), encoding="utf-8")
        else:
            write_notebook(submission(nb, overrides), samples / f"{sample}.ipynb")
            written.append(samples / f"{sample}.ipynb")
    subprocess.run([RUFF, "format", "--quiet", *map(str, written)], check=True)
    subprocess.run([RUFF, "check", "--quiet", *map(str, written)], check=True)
    expected = getattr(module, "EXPECTED", None)
    if expected is not None:
        text = json.dumps(expected, indent=1, sort_keys=True) + "\n"
        (samples / "expected.json").write_text(text, encoding="utf-8")
    print(f"wrote {len(module.SAMPLES)} samples to {samples.relative_to(ROOT)}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    for arg in sys.argv[1:]:
        build(arg.strip("/").split("/")[-1])
