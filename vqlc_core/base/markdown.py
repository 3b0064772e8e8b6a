"""The one Markdown table: every report, table and export that writes one goes through here,
so cells are escaped the same way everywhere."""

from __future__ import annotations


def cell(value) -> str:
    """A value as one table cell: pipes escaped, line breaks folded into spaces."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: list[str], rows, numeric: set[int] | None = None) -> str:
    """A Markdown table: `header` names the columns, `rows` are sequences of cell values, and the
    columns whose index is in `numeric` are right-aligned (default: every column but the first)."""
    numeric = set(range(1, len(header))) if numeric is None else numeric
    lines = ["| " + " | ".join(cell(h) for h in header) + " |",
             "|" + "|".join("---:" if i in numeric else "---" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
