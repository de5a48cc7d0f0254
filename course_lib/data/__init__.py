"""Offline, seeded data sets for the course (see each module's docstring)."""
