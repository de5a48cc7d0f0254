"""The trusted grading path: intake (:mod:`~autograder.host.intake`), the grader
(:mod:`~autograder.host.grader`), the pool of warm runners (:mod:`~autograder.host.pool`,
:mod:`~autograder.host.runner`), the pytest plugin and the student proxy that run the hidden suite
(:mod:`~autograder.host.plugin`, :mod:`~autograder.host.proxy`), the static scan
(:mod:`~autograder.host.scan`) and the results (:mod:`~autograder.host.report`). It never imports
student code, the instructor tools or the integrations.
"""
