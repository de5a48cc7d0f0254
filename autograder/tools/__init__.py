"""The instructor's tools, built on the host: authoring and release of the notebooks, the scaffold
of a new assignment, self-grading, fairness over names, mutation testing, written answers and the
similarity report. None of them is on the grading path (the host never imports them)."""
