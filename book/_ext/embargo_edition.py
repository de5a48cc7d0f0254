"""The student and instructor editions of the book (``course.yml``, ``autograder/embargo.py``).

The edition comes from the environment variable ``COURSE_EDITION`` (``student``, the default, or
``instructor``; ``make book EDITION=instructor``) or the Sphinx setting ``course_edition``.

In the student edition, a ``literalinclude`` with ``:pyobject:`` of a ``course_lib`` object that
an assignment grades, and whose solutions are not released, shows the object with each graded
body replaced by its signature and docstring, in a box that says where the student implements it
("You implement this in A3, part 1 (Layer normalisation)"). Pages still execute with the full
library. Prose that spells out an implementation is marked with the ``embargo`` directive::

    ```{embargo} course_lib.layers.LayerNorm.forward
    The forward pass subtracts the mean, ...
    ```

and shows only the box in the student edition. The instructor edition shows everything.
"""

from __future__ import annotations

import os
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.directives.code import LiteralInclude, LiteralIncludeReader
from sphinx.util.docutils import SphinxDirective

EDITIONS = ("student", "instructor")


def _plan(app: Sphinx):
    """The embargo map: module -> {qualname: where}, or {} in the instructor edition."""
    cached = getattr(app, "_course_embargo", None)
    if cached is not None:
        return cached
    edition = app.config.course_edition
    if edition not in EDITIONS:
        raise ValueError(f"course_edition must be one of {EDITIONS}, not {edition!r}")
    by_module: dict[str, dict[str, str]] = {}
    root = Path(app.config.course_root or Path(app.srcdir).parent).resolve()
    if edition == "student":
        from autograder.course.embargo import plan

        schedule = app.config.course_schedule
        by_module = plan(root, Path(schedule) if schedule else None).by_module()
    app._course_embargo = (root, by_module)
    return app._course_embargo


def _box(where: str, content: list[nodes.Node]) -> nodes.admonition:
    box = nodes.admonition(classes=["embargo", "tip"])
    box += nodes.title(text=f"You implement this in {where}")
    box += nodes.paragraph(
        text="The course library's own version is shown once the solutions are released; "
        "here are its signature and docstring."
        if content
        else "This explanation is shown once the solutions are released."
    )
    box.extend(content)
    return box


def _schedule_dependency(directive: SphinxDirective, root: Path) -> None:
    schedule = Path(directive.config.course_schedule or root / "course.yml")
    if schedule.exists():
        directive.env.note_dependency(str(schedule))


class EmbargoLiteralInclude(LiteralInclude):
    """``literalinclude`` that shows a stub of the embargoed ``course_lib`` objects."""

    def run(self) -> list[nodes.Node]:
        result = super().run()
        pyobject = self.options.get("pyobject")
        root, by_module = _plan(self.env.app)
        _schedule_dependency(self, root)
        if not pyobject or not by_module or not result:
            return result
        _, filename = self.env.relfn2path(self.arguments[0])
        path = Path(filename).resolve()
        try:
            rel = path.relative_to(root / "course_lib")
        except ValueError:
            return result
        parts = ["course_lib", *rel.with_suffix("").parts]
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        targets = by_module.get(module, {})
        hit = {q: w for q, w in targets.items() if q == pyobject or q.startswith(pyobject + ".")}
        if not hit:
            return result
        from autograder.course.embargo import stub_source

        stub = stub_source(path.read_text(encoding="utf-8"), targets, body="ellipsis")
        cache = Path(self.env.app.doctreedir) / "embargo_stubs" / rel
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(stub, encoding="utf-8")
        text, _ = LiteralIncludeReader(str(cache), self.options, self.config).read()
        block = result[0]
        literal = block if isinstance(block, nodes.literal_block) else None
        if literal is None:
            literal = next(iter(block.findall(nodes.literal_block)), None)
        if literal is None:
            return result
        literal.children = [nodes.Text(text)]
        literal.rawsource = text
        wheres = sorted(set(hit.values()))
        return [_box("; ".join(wheres), result)]


class EmbargoDirective(SphinxDirective):
    """Prose about an object's implementation: hidden in the student edition while embargoed."""

    has_content = True
    required_arguments = 1
    optional_arguments = 20
    final_argument_whitespace = False
    option_spec = {"class": directives.class_option}

    def run(self) -> list[nodes.Node]:
        root, by_module = _plan(self.env.app)
        _schedule_dependency(self, root)
        wheres = []
        for dotted in self.arguments:
            module = max((m for m in by_module if dotted.startswith(m + ".")), key=len, default="")
            qualname = dotted[len(module) + 1 :] if module else ""
            for q, where in by_module.get(module, {}).items():
                if q == qualname or q.startswith(qualname + "."):
                    wheres.append(where)
        if wheres:
            return [_box("; ".join(sorted(set(wheres))), [])]
        container = nodes.container(classes=["embargo-released", *self.options.get("class", [])])
        self.state.nested_parse(self.content, self.content_offset, container)
        return [container]


def setup(app: Sphinx) -> dict:
    app.add_config_value(
        "course_edition", os.environ.get("COURSE_EDITION", "student") or "student", "env"
    )
    app.add_config_value("course_root", "", "env")  # default: the folder above the book
    app.add_config_value("course_schedule", "", "env")  # default: <course_root>/course.yml
    app.add_directive("literalinclude", EmbargoLiteralInclude, override=True)
    app.add_directive("embargo", EmbargoDirective)

    def digest(app: Sphinx, config) -> None:  # a schedule change rebuilds the pages
        _root, by_module = _plan(app)
        config.course_embargo_digest = repr(sorted((m, sorted(t)) for m, t in by_module.items()))

    app.add_config_value("course_embargo_digest", "", "env")
    app.connect("config-inited", digest, priority=900)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
