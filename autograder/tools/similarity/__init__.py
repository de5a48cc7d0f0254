"""Similarity report: which submissions share code that few others in the class wrote.

For every graded (solution) code cell of an assignment, each submission's code is compared with
every other submission's, with the references (the same-named objects in ``course_lib`` and the
solution notebook's cell) and with optional past submissions. It only flags: scores are never
touched. The pipeline, one module each:

- :mod:`.units`: the code ``grade`` runs, per graded cell (the grader's own intake: nothing is
  executed), for students, references and past submissions;
- :mod:`.normalise`: an AST normaliser that defeats the usual disguises (renaming, reformatting,
  comments, import aliases, reordered independent statements, helper extraction, operand order,
  ``x += y``); the release's provided code is subtracted;
- :mod:`.fingerprints`: winnowed k-gram hashes of the normalised tokens;
- :mod:`.weighting`: each fingerprint weighed by how many submissions of the class (and of the
  instructor's independent rewrites, ``--background``) hold it, so that the one natural way to
  write a cell counts for nothing; one ranked list of pairs with the evidence summed over cells;
- :mod:`.report`: similarity.md/.html/.json, a side-by-side view of every flagged pair;
- :mod:`.command`: ``python -m autograder similarity`` and ``grade``'s report section.

Measured on the corpus of tests/grader/fixtures/similarity (A2 and A3 classes of 32 independent
students, 11 disguised copies of the reference, of peers and of a past year) against Dolos and
copydetect with ``benchmarks/similarity.py``; its docstring has the figures.
"""

from autograder.tools.similarity.command import Result, analyse, main, report_safely, run
from autograder.tools.similarity.fingerprints import WINDOW, K, fingerprints
from autograder.tools.similarity.units import MIN_TOKENS, Block, Builder, Unit
from autograder.tools.similarity.weighting import THRESHOLD, Match, cell_weights, rank

__all__ = ["K", "MIN_TOKENS", "THRESHOLD", "WINDOW", "Block", "Builder", "Match", "Result",
           "Unit", "analyse", "cell_weights", "fingerprints", "main", "rank", "report_safely",
           "run"]  # fmt: skip
