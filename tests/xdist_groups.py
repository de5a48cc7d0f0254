"""A hook (imported by tests/conftest.py): ``xdist_group`` works with pytest 9."""

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Make ``--dist loadgroup`` keep an ``xdist_group`` on one worker again.

    pytest-xdist (3.8) marks a grouped test by setting ``item._nodeid`` to ``<nodeid>@<group>``,
    but pytest 9 reads a node's id from ``item._id``, so the suffix never reached the scheduler and
    a group's tests were spread over both workers (the browser tests' survey of every page, a
    module fixture, ran once per worker). Runs after xdist's hook and moves its suffix where pytest
    9 looks; without xdist, or once xdist writes the id itself, it changes nothing.
    ``tests/course/test_environment.py`` checks that a group stays on one worker.
    """
    from _pytest.nodeid import coerce_node_id

    for item in items:
        grouped = item.__dict__.get("_nodeid")
        if isinstance(grouped, str) and item.nodeid != grouped:
            item._id = coerce_node_id(grouped)
