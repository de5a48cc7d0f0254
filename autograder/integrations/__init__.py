"""Where the grader meets other systems: nbgrader (its gradebook, its bookkeeping files and the
formgrader's Autograde button: :mod:`~autograder.integrations.gradebook`,
:mod:`~autograder.integrations.bookkeeping`, :mod:`~autograder.integrations.nbbridge`) and
Gradescope (:mod:`~autograder.integrations.gradescope`)."""
