"""Help pages in sections, with examples: what ``worldpager CMD --help`` looks like.

Owns ``SectionedCommand``, a ``click.Command`` whose help lists its options under titled sections
(Inputs, Output, Model, Memory, Disk tier, Positions, Run control, then the command's own) instead of
one flat list, and ends with an Examples block. The section of a session option is its ``group`` in
the option table (``engine.settings.options``); a command's own flags name theirs in ``sections``
(``{"quiet": "Output"}``); anything else (``--help``) goes under Options. Sections are written in the
order of ``engine.settings.options.SECTIONS``, then any section a command adds, in the order first met.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import click

from engine.settings.options import BY_NAME, SECTIONS

OTHER = "Options"


class SectionedCommand(click.Command):
    """A command whose ``--help`` groups its options into sections and ends with examples."""

    def __init__(self, *args, sections: Mapping[str, str] | None = None, examples: Sequence[str] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.sections = dict(sections or {})
        self.examples = tuple(examples)

    def section_of(self, param: click.Parameter) -> str:
        if param.name in self.sections:
            return self.sections[param.name]
        option = BY_NAME.get(param.name or "")
        return option.group if option is not None else OTHER

    def grouped_options(self, ctx: click.Context) -> dict[str, list[tuple[str, str]]]:
        """Section title -> the (flags, help) rows listed under it, sections in help order."""
        rows: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                rows.setdefault(self.section_of(param), []).append(record)
        known = [s for s in SECTIONS if s in rows and s != OTHER]
        added = [s for s in rows if s not in SECTIONS]
        return {s: rows[s] for s in (*known, *added, *([OTHER] if OTHER in rows else []))}

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        for title, rows in self.grouped_options(ctx).items():
            with formatter.section(title):
                formatter.write_dl(rows)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        write_examples(formatter, self.examples)


def write_examples(formatter: click.HelpFormatter, examples: Sequence[str]) -> None:
    """An Examples section: each example's lines as given (a ``#`` line says what the next one does)."""
    if not examples:
        return
    formatter.write_paragraph()
    formatter.write_text("Examples:")
    with formatter.indentation():
        for line in examples:
            formatter.write(f"{'':>{formatter.current_indent}}{line}\n")


class ExamplesGroup(click.Group):
    """A group whose ``--help`` lists its commands with their whole first sentence (wrapped, never cut
    with "..."), then examples."""

    examples: Sequence[str] = ()

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=1000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        write_examples(formatter, self.examples)
