"""``python -m autograder <command>``: see :mod:`autograder.cli`."""

import sys

from autograder.cli import main

sys.exit(main())
