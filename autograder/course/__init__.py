"""What the course is, as files: its folders (:mod:`~autograder.course.layout`), its notebooks read
as data (:mod:`~autograder.course.notebook`) and its release policy
(:mod:`~autograder.course.embargo`, what `course.yml` keeps from students). Runs no student code and
imports nothing else of the grader: the book's extensions import this package, and only this one.
"""
