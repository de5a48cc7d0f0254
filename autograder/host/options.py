"""The grader's limits and their defaults: the one place they are written (the command line,
``gradescope`` and the tools read them from here)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass
class Options:
    jobs: int = 2
    timeout: float = 10.0  # per call
    wall: float = 600.0  # per submission (wall: CPU-bound calls have their own CPU limit)
    load_timeout: float = 30.0
    cpu: int = 600  # CPU seconds per worker process (a backstop; calls have their own limit)
    memory_gib: float = 4.0  # address space per worker (at least 4)
    sandbox: str = "auto"  # "auto", "namespace" or "fallback"
    salt: str = field(default_factory=lambda: os.environ.get("AUTOGRADER_SALT", ""))
    progress: bool = True

    @classmethod
    def from_environment(cls) -> Options:
        """The defaults, with ``AUTOGRADER_SANDBOX`` (``fallback`` on a host without namespaces)
        taken into account."""
        return cls(sandbox=os.environ.get("AUTOGRADER_SANDBOX", "auto"))
