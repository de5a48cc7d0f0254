"""course_lib: the reference implementations behind the Attention and Transformers course.

The book and the assignments import from here; nothing is defined twice. Importing the package has
no side effects (no prints, no downloads, no global seeds).
"""

__version__ = "0.1.0"
