"""nbgrader configuration for the course (read by every `nbgrader` command run from this folder).

- ``solutions/`` is nbgrader's *source* directory: notebooks with solutions and grade metadata.
- ``assignments/`` is its *release* directory: what students get (``make release`` regenerates it).
- Everything produced while grading (submissions, autograded copies, feedback, the gradebook) lives
  under one git-ignored working folder, ``grading/`` (LMS downloads go to ``grading/downloaded/``).
- ``nbgrader autograde`` (and formgrader's Autograde button) runs the course's sandboxed grader,
  never the hidden tests in the student's kernel; ``nbgrader export`` writes autograded and manual
  points per student (see ``autograder/nbbridge.py``).
- Due dates: ``c.Autograder.due_dates`` below (read by ``python -m autograder grade``).
- LMS downloads (``nbgrader zip_collect``): set ``COURSE_LMS`` to ``canvas`` (default), ``moodle``
  or ``blackboard``. The course's collector matches the pattern against the *whole upload name*
  (the path inside the LMS's zip), so a file inside an upload cannot claim another student's id.
"""

import os
import sys
import warnings
from pathlib import Path

c = get_config()  # noqa: F821 (injected by traitlets when nbgrader loads this file)

ROOT = Path(__file__).resolve().parent
WORK = ROOT / "grading"
WORK.mkdir(exist_ok=True)  # sqlite cannot create the folder that holds the gradebook

c.CourseDirectory.root = str(ROOT)
c.CourseDirectory.course_id = os.environ.get("COURSE_ID", "attention-and-transformers")
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "assignments"
c.CourseDirectory.submitted_directory = "grading/submitted"
c.CourseDirectory.autograded_directory = "grading/autograded"
c.CourseDirectory.feedback_directory = "grading/feedback"
c.CourseDirectory.solution_directory = "grading/solution"
c.CourseDirectory.db_url = f"sqlite:///{WORK / 'gradebook.db'}"
c.ZipCollectApp.downloaded_directory = "grading/downloaded"

# nbgrader imports the plug-ins below from this folder's `autograder` package.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# nbgrader 0.9's queries raise SQLAlchemy 2 deprecation warnings by the hundred: silence them.
warnings.filterwarnings("ignore", module=r"nbgrader(\.|$)")
warnings.filterwarnings("ignore", message=r".*(SQLAlchemy|relationship|Query\.get).*")

# The exchange (nbgrader collect/release): nbgrader 0.9.6's default
# /usr/local/share/nbgrader/exchange, or this.
if os.environ.get("NBGRADER_EXCHANGE"):
    c.Exchange.root = os.environ["NBGRADER_EXCHANGE"]

# Formgrader lists every folder of solutions/ as an assignment: skip helpers such as _authoring/.
try:
    from nbgrader.apps.api import NbGraderAPI

    if not getattr(NbGraderAPI.get_source_assignments, "course_filtered", False):
        _all_sources = NbGraderAPI.get_source_assignments

        def _course_sources(self):
            return {name for name in _all_sources(self) if not name.startswith(("_", "."))}

        _course_sources.course_filtered = True
        NbGraderAPI.get_source_assignments = _course_sources
except ImportError:  # configuration read without nbgrader (e.g. by the grader alone)
    pass

# Due dates (UTC unless a zone is given): lateness = submission time - due date.
c.Autograder.due_dates = {
    # "a2_self_attention": "2026-12-01 23:59:00 UTC",
}

# Never run the hidden tests in the student's kernel: route autograding to the course's grader.
# (NBGRADER_STOCK_AUTOGRADE=1 keeps nbgrader's own, for benchmarks/grading.py's comparison only.)
if not os.environ.get("NBGRADER_STOCK_AUTOGRADE"):
    c.Autograde.sanitize_preprocessors = ["autograder.integrations.nbbridge.CourseGrader"]
    c.Autograde.autograde_preprocessors = []
    c.CourseGrader.course_root = str(ROOT)

# `nbgrader export`: autograded points, manual points, lateness and the total per student.
c.ExportApp.plugin_class = "autograder.integrations.nbbridge.CourseCsvExport"

# `nbgrader zip_collect <name>`: put the LMS's zip in grading/downloaded/<name>/archive/.
LMS_PATTERNS = {
    # Canvas: smithjohn_12345_67890_a2_self_attention.ipynb (late: smithjohn_LATE_12345_...)
    "canvas": r"^(?P<name>[^/_]+)_(?P<late>LATE_)?(?P<student_id>\d+)_\d+_(?P<file_id>[^/]+)$",
    # Moodle: "John Smith_12345_assignsubmission_file_/a2.ipynb" (or the same without the slash)
    "moodle": r"^(?P<name>[^/_]+)_(?P<student_id>\d+)_assignsubmission_file_/?(?P<file_id>[^/]+)$",
    # Blackboard: A2_jsmith_attempt_2026-11-24-10-15-30_a2_self_attention.ipynb
    "blackboard": (
        r"^[^/]*?_(?P<student_id>[^/_]+)_attempt_"
        r"(?P<timestamp>\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2})_?(?P<file_id>[^/]*)$"
    ),
}
c.FileNameCollectorPlugin.named_regexp = LMS_PATTERNS[os.environ.get("COURSE_LMS", "canvas")]
c.FileNameCollectorPlugin.valid_ext = [".ipynb", ".py"]
# The course's plug-ins (autograder/integrations/lms.py): only the LMS's own zip is unpacked
# (a student's archive is copied as a file), member by member, with caps per file, per student
# and for the class; a bad member is a note for its student (in lms.json), never the class's
# abort. Submission times: the LMS's upload time (the zip entry's time; Blackboard's is in the
# file name), not the time of extraction; Canvas's LATE_ verdict and the names go to lms.json.
# A zip stores local times without a zone: set yours here.
c.ZipCollectApp.extractor_plugin = "autograder.integrations.lms.CourseExtractor"
c.ZipCollectApp.collector_plugin = "autograder.integrations.lms.LmsCollector"
c.CourseExtractor.zip_timezone = os.environ.get("COURSE_LMS_TIMEZONE", "UTC")
c.CourseExtractor.max_member_bytes = 64 * 1024**2  # the grader reads no larger notebook
c.CourseExtractor.max_student_bytes = 128 * 1024**2
c.CourseExtractor.max_total_bytes = 4 * 1024**3

# Pages (formgrader, generate_feedback): every HTMLExporter the course's nbgrader makes cleans
# the notebook first (Markdown rendered and cleaned, raw cells escaped, outputs text and images
# with numeric sizes only; autograder/integrations/pages.py) and sanitises HTML outputs.
c.HTMLExporter.sanitize_html = True
c.HTMLExporter.preprocessors = ["autograder.integrations.pages.InertPage"]

# Feedback pages typeset math offline: nbgrader's feedback template loads MathJax 2 from a CDN
# (its `mathjax()` macro takes no URL from the configuration), so offline a student saw raw
# `$...$`. The book's offline MathJax 3 (sphinx-mathjax-offline, self-contained SVG output) is
# inlined instead, through a `mathjax.html.j2` found before nbconvert's (about 2 MB a page).
# Formgrader keeps its own templates (and the CDN).
MATHJAX_CONFIG = (
    "window.MathJax = {tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']], displayMath: "
    "[['$$', '$$'], ['\\\\[', '\\\\]']], processEscapes: true, processEnvironments: true}, "
    "svg: {fontCache: 'global'}};"
)


def _offline_feedback_templates() -> list[str]:
    try:
        import nbgrader
    except ImportError:
        return []
    site = Path(nbgrader.__file__).resolve().parents[1]
    mathjax = site / "sphinx-mathjax-offline" / "static" / "mathjax" / "tex-svg.js"
    nbgrader_templates = Path(nbgrader.__file__).parent / "server_extensions/formgrader/templates"
    if not mathjax.is_file():
        return []
    macro = WORK / "templates" / "feedback" / "mathjax.html.j2"
    script = mathjax.read_text(encoding="utf-8")
    text = (
        '{%- macro mathjax(url="") -%}\n<!-- MathJax 3, inline: offline, no CDN -->\n'
        f"<script>{MATHJAX_CONFIG}</script>\n<script>{{% raw %}}{script}{{% endraw %}}</script>\n"
        "{%- endmacro %}\n"
    )
    if not macro.is_file() or macro.read_text(encoding="utf-8") != text:
        macro.parent.mkdir(parents=True, exist_ok=True)
        macro.write_text(text, encoding="utf-8")
    return [str(WORK / "templates"), str(nbgrader_templates)]


_feedback_templates = _offline_feedback_templates()
if _feedback_templates:
    c.HTMLExporter.extra_template_basedirs = _feedback_templates

# Releases must not depend on which files happen to sit beside a source notebook.
# The text source of a notebook (solutions/<name>/<name>.md, with the solutions) is never released.
c.CourseDirectory.ignore = [
    ".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".DS_Store", "*.md"
]  # fmt: skip

# Student notebooks: stubs raise NotImplementedError so a blank function fails loudly, not silently.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Hidden tests never live in notebooks: they are pytest suites in autograder/suites/<assignment>/,
# run by `python -m autograder grade`. Nothing in a release may contain them.
c.ClearHiddenTests.enforce_metadata = True
