"""Every option of every ``gpuwarden`` subcommand says what it is and, when it takes a value, its default;
``--config`` is accepted after any subcommand that reads the config."""

from __future__ import annotations

import argparse

import pytest

from gpuwarden.app.cli import build_parser


def _parsers(parser: argparse.ArgumentParser, path: str = "gpuwarden") -> list[tuple[str, argparse.ArgumentParser]]:
    """The parser and its subcommands' parsers, depth first (argparse has no public walk)."""
    out = [(path, parser)]
    for action in parser._actions:  # noqa: SLF001 - a test reading argparse's structure
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for name, sub in action.choices.items():
                out += _parsers(sub, f"{path} {name}")
    return out


PARSERS = _parsers(build_parser())
LEAVES = [(p, parser) for p, parser in PARSERS
          if not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)]  # noqa: SLF001


@pytest.mark.parametrize("path,parser", PARSERS, ids=[p for p, _ in PARSERS])
def test_every_option_has_help_and_states_its_default(path: str, parser: argparse.ArgumentParser) -> None:
    for a in parser._actions:  # noqa: SLF001
        if isinstance(a, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):  # noqa: SLF001
            continue
        name = "/".join(a.option_strings) or a.dest
        assert a.help and a.help.strip(), f"{path} {name}: no help text"
        takes_value = a.option_strings and a.nargs != 0
        chosen = any(a in g._group_actions and g.required for g in parser._mutually_exclusive_groups)  # noqa: SLF001
        if takes_value and not a.required and not chosen:
            assert "default" in a.help, f"{path} {name}: help does not state the default: {a.help!r}"


def test_config_is_accepted_after_any_subcommand_that_reads_it() -> None:
    parser = build_parser()
    for path, sub in LEAVES:
        if path.split()[1] in ("rules", "config"):  # they take the file to check, not a config
            continue
        argv = path.split()[1:] + ["--config", "f.yaml"]
        at = len(path.split()) - 1
        for a in sub._actions:  # noqa: SLF001 - fill what the subcommand requires, in order
            if not a.option_strings and a.dest != "help":
                argv.insert(at, "x=1" if a.dest == "matchers" else a.choices[0] if a.choices else "x")
                at += 1
        for g in sub._mutually_exclusive_groups:  # noqa: SLF001
            if g.required:
                first = g._group_actions[0]  # noqa: SLF001
                argv += [first.option_strings[0]] + ([] if first.nargs == 0 else ["x"])
        for a in sub._actions:  # noqa: SLF001
            if a.required and a.option_strings and not any(o in argv for o in a.option_strings):
                argv += [a.option_strings[0], "philly" if a.choices else "x"]
        assert parser.parse_args(argv).config == "f.yaml", argv
    assert parser.parse_args(["report", "--config", "f.yaml", "usage"]).config == "f.yaml"
