"""What the course is, as files: its folders (:mod:`~autograder.course.layout`), its notebooks read
as data (:mod:`~autograder.course.notebook`) and its release policy
(:mod:`~autograder.course.embargo`: which assignments `course.yml` hands to students, and a scan
that no answer key reaches them). Runs no student code and
imports nothing else of the grader: the book's extensions import this package, and only this one.
"""
