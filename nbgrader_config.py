"""nbgrader configuration for the course (read by every `nbgrader` command run from this folder).

- ``solutions/`` is nbgrader's *source* directory: notebooks with solutions and grade metadata.
- ``assignments/`` is its *release* directory: what students get (``make release`` regenerates it).
- Everything produced while grading (submissions, autograded copies, feedback, the gradebook) lives
  under one git-ignored working folder, ``grading/``.
"""

import os
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

# Releases must not depend on which files happen to sit beside a source notebook.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".DS_Store"]

# Student notebooks: stubs raise NotImplementedError so a blank function fails loudly, not silently.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Hidden tests never live in notebooks: they are pytest suites in autograder/tests/<assignment>/,
# run by `python -m autograder grade`. Nothing in a release may contain them.
c.ClearHiddenTests.enforce_metadata = True
