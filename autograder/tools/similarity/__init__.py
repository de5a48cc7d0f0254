"""Similarity report: which submissions share code that few others in the class wrote.

For every graded (solution) code cell of an assignment, each submission's code is compared with
every other submission's, with the references (the same-named objects in ``course_lib`` and in
the answer key ``autograder/suites/<name>/aN_key.py``, and the solution notebook's cell) and
with optional past submissions. It only flags: scores are never
touched. The pipeline, one module each:

- :mod:`.units`: the code ``grade`` runs, per graded cell (the grader's own intake: nothing is
  executed), for students, references and past submissions;
- :mod:`.normalise`: an AST normaliser that defeats the usual disguises (renaming, reformatting,
  comments, import aliases, reordered independent statements, helper extraction, operand order,
  ``x += y``); the release's provided code is subtracted;
- :mod:`.fingerprints`: winnowed k-gram hashes of the normalised tokens;
- :mod:`.weighting`: each fingerprint weighed by how many submissions of the class (and of the
  instructor's independent rewrites, ``--background``) hold it, so that the one natural way to
  write a cell counts for nothing; the key's code is the exception: against the references a
  fingerprint counts unless the rewrites (by default the course's independent corpus) hold it,
  in the token stream and in a shape stream that survives heavy disguises, so a key half the
  class hands in is still flagged; one ranked list of pairs with the evidence summed over cells;
- :mod:`.report`: similarity.md/.html/.json, a side-by-side view of every flagged pair;
- :mod:`.command`: ``python -m autograder similarity`` and ``grade``'s report section.

Why not Dolos or copydetect (``benchmarks/similarity.py``, on the corpus of
tests/grader/fixtures/similarity: A2 and A3 classes of 32 independent students, a past year of 8
and 11 disguised copies of the reference, of peers, of a copy and of the past year; 22 copy pairs
per assignment among about 1,200 pairs):

- ours, at its one threshold 0.5: precision and recall 1.0 on both; every copy pair ranks above
  every independent pair (weakest copy 0.53 against the strongest independent pair 0.39 on A2,
  0.74 against 0.48 on A3);
- Dolos 3.5 (``@dodona/dolos-lib``, whole files, the release as its ignored template): at 0.5,
  precision 1.0 and recall 0.59 on A2, precision 0.12 and recall 1.0 on A3; the best threshold,
  chosen afterwards per assignment, gives F1 0.94 and 0.98 and never separates the two kinds
  (its ``maxFingerprintPercentage``, the closest to our weighting, drops copies to 0.04);
- copydetect 0.5 at its 0.33: precision 0.02; with k=10 and the best threshold per assignment, F1
  0.95 on A2 (weakest copy 0.77, strongest independent pair 0.78) and 1.0 on A3.

Both compare text tokens of whole files: renaming and reordering cost them, and every shared line
weighs alike, so a class writing the same natural forms looks like a class of copies.
"""

from autograder.tools.similarity.command import Result, analyse, main, report_safely, run
from autograder.tools.similarity.fingerprints import WINDOW, K, fingerprints
from autograder.tools.similarity.units import MIN_TOKENS, Block, Builder, Unit
from autograder.tools.similarity.weighting import THRESHOLD, Match, cell_weights, rank

__all__ = ["K", "MIN_TOKENS", "THRESHOLD", "WINDOW", "Block", "Builder", "Match", "Result",
           "Unit", "analyse", "cell_weights", "fingerprints", "main", "rank", "report_safely",
           "run"]  # fmt: skip
