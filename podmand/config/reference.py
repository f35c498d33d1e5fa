"""The settings reference table of docs/configuration.md, written from the schema.

The table is generated, never edited: ``python -m podmand.config.reference
docs/configuration.md`` rewrites it between its markers, and a test fails when
the page and the schema disagree. So the page, ``--help`` and the checks cannot
drift apart: all three read each field's :class:`~.schema.Setting`.
"""

from __future__ import annotations

import sys
from typing import Any

from .options import ADMISSION_JSON_ENV, DECLARED, expected_value, range_words
from .schema import Settings

BEGIN = (
    "<!-- settings table: generated from podmand/config/schema.py by "
    "'python -m podmand.config.reference docs/configuration.md'; do not edit by hand -->"
)
END = "<!-- end of settings table -->"


def _code(text: str) -> str:
    return f"`{text}`"


def _default(field: str, value: Any) -> str:
    shown = DECLARED[field][1].default
    if shown:
        return shown
    if isinstance(value, bool):
        return _code(str(value).lower())
    if isinstance(value, float) and value.is_integer():
        return _code(str(int(value)))
    if value is None or value == "" or value == []:
        return "unset"
    if isinstance(value, list):
        return _code(",".join(str(v) for v in value))
    return _code(str(value))


def _takes(field: str) -> str:
    """In the words a refusal uses: the type, then the range where there is one."""
    takes, limits = expected_value(field), range_words(field)
    return f"{takes}, {limits}" if limits else takes


def rows() -> list[list[str]]:
    defaults = Settings()
    out = []
    for field, (_, s) in DECLARED.items():
        flag = _code(s.flag) + "".join(f" ({_code(a)})" for a in s.aliases) if s.flag else "—"
        env = _code(s.env) if s.env else f"in {_code(ADMISSION_JSON_ENV)}"
        meaning = s.help + (f" (see [{s.see}]({s.see}))" if s.see else "")
        out.append([_code(field), flag, env, _default(field, getattr(defaults, field)), _takes(field), meaning])
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def table() -> str:
    lines = ["| Key | Flag | Environment | Default | Takes | Meaning |", "|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows()]
    return "\n".join(lines)


def rewrite(page: str) -> str:
    """``page`` with the text between the markers replaced by :func:`table`."""
    head, sep, rest = page.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not sep or not end:
        raise ValueError(f"the page lacks the markers {BEGIN!r} and {END!r}")
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    for path in argv:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        with open(path, "w", encoding="utf-8") as f:
            f.write(rewrite(text))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
