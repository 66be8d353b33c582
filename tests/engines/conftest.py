"""Fixtures of the engine tests (the loopback fake OpenAI server the toy engine serves)."""

from support.fake_openai import small_dataset  # noqa: F401 - pytest fixture
