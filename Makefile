# Attention and Transformers: the two commands are `make` (build the course) and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Installed with --no-deps: timm declares torchvision, which has no wheel for our CPU torch pin and
# which the course never runs (tests/lib/test_timm_interop.py stubs the import). timm's other
# dependencies (huggingface_hub, safetensors, pyyaml) come with transformers.
# tests/course/test_environment.py checks this pin against environment.yml and the installed version.
NO_DEPS_PINS := timm==1.0.31
# Tools the venv provides (nbgrader calls `alembic`, the book calls `jupyter`) come first on PATH.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
ASSIGNMENTS := $(notdir $(wildcard solutions/a*_*))

.PHONY: all course install book release selfgrade summary test lint pytest clean student-bundle new-assignment test-lib test-grader test-book test-course mutants fairness launch-notebooks

all: course

course: install book release selfgrade summary

## install: create .venv (if missing) and install the pinned dependencies and the project, editable.
install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade --quiet pip
	$(PY) -m pip install --quiet -e ".[dev]"
	$(PY) -m pip install --quiet --no-deps $(NO_DEPS_PINS)
	@if $(PY) -m pip list 2>/dev/null | grep -qi '^nvidia-'; then \
		echo "error: nvidia-* packages were installed; torch must stay pinned to the CPU build" >&2; exit 1; fi
	@touch $(STAMP)

## book: build the Jupyter Book to book/_build/html (warnings are errors).
book: install
	$(PY) book/scripts/execute_pages.py
	$(VENV)/bin/jupyter-book build book --warningiserror --nitpick --keep-going

## new-assignment: scaffold a complete assignment (text source, hidden suite, visible checks,
## samples) that passes `python -m autograder check` at once: make new-assignment NAME=a6_topic
new-assignment: install
	@test -n "$(NAME)" || { echo "usage: make new-assignment NAME=a6_topic" >&2; exit 2; }
	$(PY) -m autograder new-assignment $(NAME)

## release: regenerate the student releases in assignments/ from the nbgrader sources in solutions/.
release: install
	@if [ -n "$(ASSIGNMENTS)" ]; then $(PY) -m autograder release $(ASSIGNMENTS); \
	else echo "release: no assignment sources in solutions/ yet"; fi

## selfgrade: grade the reference solutions, blank releases and sample submissions.
selfgrade: install
	@if [ -n "$(ASSIGNMENTS)" ]; then $(PY) -m autograder selfgrade $(ASSIGNMENTS); \
	else echo "selfgrade: no assignments yet"; fi

summary: install
	@$(PY) -m course_lib summary

## test: ruff (check + format check), the book as `make book` builds it (into book/_build: after
## `make` Sphinx finds nothing to do; on a fresh clone every page executes once, in parallel), then
## pytest (its browser tests load those pages).
test: install lint book pytest

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

pytest: install
	$(PY) -m pytest -n 2 --dist loadgroup --durations=20

## test-lib, test-grader, test-book, test-course: one area of tests/ (test-lib is the fast loop on
## course_lib: it never imports the grader).
test-lib test-grader test-book test-course: test-%: install
	$(PY) -m pytest -n 2 --dist loadgroup tests/$*

## mutants: the full mutation sweep: every catalogued mistake of every assignment under three
## student names (make test grades every mistake under one name and every eighth under three).
mutants: install
	$(PY) -m autograder mutants --all --names 3 --strict --jobs 2

## fairness: the full fairness sweep under 20 student names: every independent correct variant
## (autograder/samples/<name>/independent/) at full marks, and the reference, blank and samples
## scoring the same under every name (make test grades each variant under 8 names, A5's
## training test under 1 of them rotating through the 8: tests/course/test_corpus.py TRAINED).
fairness: install
	$(PY) -m autograder corpus --all --names 20 --jobs 2
	$(PY) -m autograder fairness $(ASSIGNMENTS) --names 20 --jobs 2

## launch-notebooks: every launch notebook of the built site (the Colab and Binder buttons, and
## Download > .ipynb) runs top to bottom in a fresh environment that has only the site's wheel, as
## on Colab (make test runs one per chapter: tests/book/test_launch_notebooks.py RUN).
launch-notebooks: install book
	LAUNCH_NOTEBOOKS=all $(PY) -m pytest -n 2 tests/book/test_launch_notebooks.py -k fresh_environment

## student-bundle: dist/student/ and dist/student.zip for students: the released notebooks, the
## public wheel of course_lib, the book (NO_BOOK=1 leaves it out), a README; the build scans it for
## any statement of an answer key (autograder/suites/<name>/<aN>_key.py).
student-bundle: install $(if $(NO_BOOK),,book)
	$(PY) -m autograder embargo bundle --out dist/student $(if $(NO_BOOK),,--book book/_build/html)

clean:
	rm -rf book/_build build_artifacts
