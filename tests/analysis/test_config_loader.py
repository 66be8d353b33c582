"""The one config loader: the same message shape for every schema."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field

from harness.config import load_yaml, validate
from harness.errors import ConfigError, RunError


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    size: int = Field(gt=0)


class Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    inner: Inner


def test_messages_name_file_and_key_path(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    cases = {
        "name: a\ninner: {size: 1, colour: red}\n": "key 'inner.colour': unknown key 'colour'",
        "inner: {size: 1}\n": "key 'name': required key missing",
        "name: a\ninner: {size: 0}\n": "key 'inner.size': Input should be greater than 0",
        "[1, 2]\n": "a thing must be a mapping of keys, got list",
        "name: [\n": "not valid YAML",
    }
    for text, expected in cases.items():
        path.write_text(text)
        with pytest.raises(ConfigError) as info:
            load_yaml(path, Outer, "thing")
        assert str(info.value).startswith(f"{path}: "), str(info.value)
        assert expected in str(info.value), (text, str(info.value))
    with pytest.raises(ConfigError, match=r"nope\.yaml: thing not found"):
        load_yaml(tmp_path / "nope.yaml", Outer, "thing")
    path.write_text("name: a\ninner: {size: 2}\n")
    assert load_yaml(path, Outer, "thing").inner.size == 2


def test_prefix_every_error_and_error_class() -> None:
    bad = {"name": 3, "inner": {"size": -1}}
    with pytest.raises(RunError) as info:
        validate(Outer, bad, "f.json", prefix="entries.e1", every=True, error=RunError)
    message = str(info.value)
    assert message.startswith("f.json: key 'entries.e1.name': ")
    assert "; key 'entries.e1.inner.size': Input should be greater than 0" in message
