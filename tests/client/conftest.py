"""Fixtures of the client tests (the loopback fake OpenAI server of tests/support)."""

from support.fake_openai import fake_server, small_dataset  # noqa: F401 - pytest fixtures
