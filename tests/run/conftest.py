"""Fixtures of the run-stage tests."""

from support.fake_openai import fake_server, partial_run, small_dataset  # noqa: F401 - pytest fixtures
