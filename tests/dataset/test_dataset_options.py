"""`repro dataset build`'s options come from the recipe schema: one per field, the original
builder's names as declared aliases, conflicting spellings rejected, integer lists parsed
without click internals."""

from __future__ import annotations

import inspect

import click
import pytest

from harness.cli import dataset as cli_dataset
from harness.dataset.recipe import Recipe, cli_fields, cli_overrides
from harness.errors import ConfigError


def _params(args: list[str], command: click.Command = cli_dataset.build_command) -> dict:
    with command.make_context(command.name or "build", list(args)) as ctx:
        return ctx.params


def test_every_recipe_field_is_an_option_with_its_schema_help():
    options = {o: p for p in cli_dataset.build_command.params for o in p.opts}
    for name, info, aliases in cli_fields():
        flag = "--" + name.replace("_", "-")
        assert options[flag].name == name and info.description in options[flag].help
        for alias in aliases:
            assert alias in options and options[alias].name != name
    exposed = {name for name, _info, _aliases in cli_fields()}
    assert exposed == set(Recipe.model_fields) - {"name", "description"}


def test_the_original_names_map_to_recipe_fields():
    params = _params(
        ["--model-path", "tiny:tokenizer", "--dataset-name", "t.jsonl", "--pad-dataset-name", "p"]
    )
    overrides = cli_overrides(params)
    assert overrides == {"tokenizer": "tiny:tokenizer", "trajectories": "t.jsonl", "pad_text": "p"}
    assert cli_overrides(_params(["--model", "a", "--tokenizer", "a"])) == {"tokenizer": "a"}
    with pytest.raises(ConfigError, match="conflicting values for pad_text: 'x' and 'y'"):
        cli_overrides(_params(["--pad-dataset-name", "x", "--pad-text", "y"]))


def test_option_types_follow_the_schema():
    params = _params(["--first-turn-length", "12", "--max-real-first-turn-frac", "0.25"])
    assert params["first_turn_length"] == 12 and params["max_real_first_turn_frac"] == 0.25
    assert _params(["--only-resolved"])["only_resolved"] is True
    assert _params([])["only_resolved"] is None  # absent: the recipe's value stays
    with pytest.raises(click.BadParameter):
        _params(["--pad-source", "nonsense"])
    with pytest.raises(click.BadParameter):
        _params(["--num-turns", "many"])


def test_integer_lists_stop_at_the_first_non_integer():
    params = _params(["--sweep-numbers", "2", "8", "30", "cpu-tiny", "--number", "3"])
    assert params["sweep_numbers"] == [2, 8, 30] and params["recipe"] == "cpu-tiny"
    assert params["number"] == 3
    assert _params(["--sweep-numbers=2,4", "8"])["sweep_numbers"] == [2, 4, 8]
    plan = _params(["--numbers", "4", "16", "--conversations", "20"], cli_dataset.plan_command)
    assert plan["numbers"] == [4, 16] and plan["conversations"] == 20
    with pytest.raises(click.BadParameter):
        _params(["--sweep-numbers", "x1"])
    with pytest.raises(click.UsageError):
        _params(["--sweep-numbers"])


def test_no_alias_table_and_no_click_internals():
    from harness.dataset import cli_support

    source = inspect.getsource(cli_dataset) + inspect.getsource(cli_support)
    assert "_long_opt" not in source and "_short_opt" not in source
    assert "model_path" not in source and "pad_dataset_name" not in source
