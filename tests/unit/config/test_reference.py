"""One place per setting: docs/configuration.md's table, ``serve --help`` and the range
checks all say what the schema declares beside each field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from podmand.cli.parser import parser
from podmand.config import Settings, reference
from podmand.config.checks import validate
from podmand.config.options import DECLARED, OPTIONS, Option, range_words
from podmand.errors import ConfigError

PAGE = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"
RANGED = [f for f, (_, s) in DECLARED.items() if s.minimum is not None or s.maximum is not None]


def test_the_docs_table_is_the_schemas() -> None:
    """Regenerate with: python -m podmand.config.reference docs/configuration.md"""
    text = PAGE.read_text()
    assert reference.BEGIN in text and reference.END in text
    assert reference.rewrite(text) == text


def test_the_table_has_one_row_per_setting_in_declaration_order() -> None:
    keys = [row[0].strip("`") for row in reference.rows()]
    assert keys == list(DECLARED)  # the schema's order: its structs in chain order, each's fields as written
    assert sorted(keys) == sorted(Settings.__struct_fields__)  # every field of the struct, once
    firsts = [keys.index(f) for f in ("socket", "podman_socket", "sandbox_image", "grpc_endpoint")]
    assert firsts == sorted(firsts) and firsts[0] == 0  # serving, Podman, sandboxes, network


def serve_help() -> str:
    sub = next(a for a in parser()._actions if a.dest == "command")
    text: str = sub.choices["serve"].format_help()  # type: ignore[attr-defined]
    return text


@pytest.mark.parametrize("opt", OPTIONS, ids=lambda o: o.field)
def test_help_names_the_flag_the_variable_the_text_and_the_range(opt: Option) -> None:
    text = serve_help()
    for flag in (opt.flag, *opt.aliases):
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), flag
    assert "".join(f"{opt.help} [{opt.env}]".split()) in "".join(text.split())  # as argparse wraps it
    if opt.field in RANGED:
        assert range_words(opt.field) in opt.help


CONTEXT: dict[str, dict[str, object]] = {}  # other settings a field's bounds need set, by field


@pytest.mark.parametrize("field", RANGED)
def test_the_declared_range_is_the_checked_one(field: str) -> None:
    """The bounds are accepted, one past each refused with the range in words, and 0
    accepted wherever the declaration says what it means."""
    kind, s = DECLARED[field]
    bounds = [b for b in (s.minimum, s.maximum) if b is not None]
    for ok in bounds + ([0] if s.zero else []):
        validate(Settings(**CONTEXT.get(field, {}), **{field: kind(ok)}))
    beyond = ([s.minimum - 1] if s.minimum is not None else []) + ([s.maximum + 1] if s.maximum is not None else [])
    for bad in [b for b in beyond if not (b == 0 and s.zero)]:
        with pytest.raises(ConfigError) as exc:
            validate(Settings(**CONTEXT.get(field, {}), **{field: kind(bad)}))
        assert str(exc.value).endswith(f"must be {range_words(field)}")


def test_rewrite_needs_its_markers() -> None:
    with pytest.raises(ValueError, match="markers"):
        reference.rewrite("# a page without the table\n")
