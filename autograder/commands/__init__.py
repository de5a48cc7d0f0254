"""The commands of ``python -m autograder``: each module registers its own with
:func:`autograder.cli.command` (nbgrader's one app per command, without the framework). Heavy
imports stay inside each ``run`` so that ``--help`` and every other command start fast."""
