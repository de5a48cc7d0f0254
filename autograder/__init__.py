"""The trusted grader: hidden pytest suites run against sandboxed student code."""
