"""The user docs against the command line: every flag of every command is documented, every
``worldpager`` command line in a shell block of the docs parses, every relative link resolves, and
the front page stays short.

The docs are README.md and docs/*.md. A command line is parsed by click as the command would parse
it (options, their types and choices, arguments, subcommands) without invoking anything. In those
lines ``$VAR``, ``${VAR}``, ``<name>`` and capitalised metavariables (``DIR``, ``N``, ``GIB``, as in
the flag tables) are placeholders: they stand for a valid value of whatever option they are given to.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
from pathlib import Path

import click
import pytest

from worldpager_cli.main import cli
from worldpager_cli.options import CheckedNumber

ROOT = Path(__file__).resolve().parents[2]
FRONT_PAGE_MAX_LINES = 250

# Pages a link may name before they exist (none at present): the link check skips them.
PENDING_PAGES: frozenset[str] = frozenset()

SHELL_LANGUAGES = ("bash", "sh", "shell", "console")
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
SEPARATORS = {"|", "||", "&&", ";", "&"}
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PLACEHOLDER = re.compile(r"^(\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|[A-Z][A-Z0-9_]*)$")
ANGLED_PLACEHOLDER = re.compile(r"<([A-Za-z][\w.-]*)>")
REDIRECTION = re.compile(r"(?<![\w=-])\d*(?:>>|>|<)(?:&\d*-?|\s*[^\s|&;<>]+)")


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def doc_text() -> str:
    return "\n".join(page.read_text(encoding="utf-8") for page in doc_pages())


def walk_commands(command: click.Command, path: tuple[str, ...] = ("worldpager",)):
    """Every command and subcommand of ``command``, with its path of names."""
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from walk_commands(sub, (*path, name))


# ---------------------------------------------------------------------------------------------
# (a) every option is documented


def option_spellings() -> dict[str, set[str]]:
    """Each long and short spelling of every option, with the commands that take it."""
    spellings: dict[str, set[str]] = {}
    for path, command in walk_commands(cli):
        for param in command.params:
            if isinstance(param, click.Option):
                for spelling in (*param.opts, *param.secondary_opts):
                    spellings.setdefault(spelling, set()).add(" ".join(path))
    return spellings


def documented(spelling: str, text: str) -> bool:
    """``--spill`` appears as a word of its own (not as the start of ``--spill-x``)."""
    return re.search(rf"(?<![\w-]){re.escape(spelling)}(?![\w-])", text) is not None


def test_every_option_of_every_command_is_documented():
    text = doc_text()
    missing = sorted(f"{spelling} ({', '.join(sorted(commands))})"
                     for spelling, commands in option_spellings().items() if not documented(spelling, text))
    assert not missing, "options not in README.md or docs/*.md:\n  " + "\n  ".join(missing)


# ---------------------------------------------------------------------------------------------
# (b) every documented command line parses


def shell_blocks(page: Path) -> list[tuple[int, str]]:
    """The fenced shell blocks of ``page``: (line of the block's first line, text)."""
    text = page.read_text(encoding="utf-8")
    return [(text.count("\n", 0, match.start(2)) + 1, match.group(2))
            for match in FENCE.finditer(text) if match.group(1).lower() in SHELL_LANGUAGES]


def logical_lines(block: str, first_line: int):
    """The block's lines with ``\\`` continuations joined and a console's ``$ `` prompt removed."""
    pending, start = "", first_line
    for number, line in enumerate(block.splitlines(), first_line):
        if not pending:
            start = number
            line = re.sub(r"^\s*\$ ", "", line)
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield start, pending + line
        pending = ""
    if pending:
        yield start, pending


def simple_commands(line: str) -> list[list[str]]:
    """The words of each simple command of ``line`` (split at pipes, ``&&``, ``;``), comments and
    redirections dropped."""
    line = ANGLED_PLACEHOLDER.sub(r"$\1", line)   # <name> is a placeholder, as $name is
    lexer = shlex.shlex(REDIRECTION.sub(" ", line), posix=True, punctuation_chars="|&;")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands, words = [], []
    for token in lexer:
        if token in SEPARATORS:
            commands.append(words)
            words = []
        else:
            words.append(token)
    commands.append(words)
    return commands


def worldpager_arguments(words: list[str]) -> list[str] | None:
    """The arguments after ``worldpager`` in a simple command (after env assignments, ``time``,
    ``nice -n 10``, a loop's ``do``…), or None when the command is not a worldpager one."""
    for index, word in enumerate(words):
        if word == "worldpager":
            return words[index + 1:]
        if not (ENV_ASSIGNMENT.match(word) or word in {"time", "nice", "-n", "do", "then", "else", "env"}
                or word.isdigit()):
            return None
    return None


def documented_command_lines() -> list[tuple[str, list[str]]]:
    found = []
    for page in doc_pages():
        for first_line, block in shell_blocks(page):
            for number, line in logical_lines(block, first_line):
                for words in simple_commands(line):
                    arguments = worldpager_arguments(words)
                    if arguments is not None:
                        found.append((f"{page.relative_to(ROOT)}:{number}: {line.strip()}", arguments))
    return found


def sample_value(param: click.Parameter | None) -> str:
    """A value ``param`` accepts, standing in for a placeholder given to it."""
    kind = param.type if param is not None else click.STRING
    if isinstance(kind, click.Choice):
        return str(kind.choices[0])
    if isinstance(kind, (click.IntRange, click.FloatRange)):
        return str(kind.min if kind.min is not None else 1)
    if kind in (click.INT, click.FLOAT) or isinstance(kind, (click.types.IntParamType, click.types.FloatParamType)):
        return "1"
    if isinstance(kind, CheckedNumber):   # the session options' numbers: 1 is in every one's range
        return "1"
    return "placeholder"


def with_sample_values(command: click.Command, ctx_parent: click.Context, arguments: list[str]) -> list[str]:
    """``arguments`` with each placeholder replaced by a value its option (or argument) accepts."""
    by_spelling = {s: p for p in command.get_params(ctx_parent) if isinstance(p, click.Option)
                   for s in (*p.opts, *p.secondary_opts)}
    out, previous = [], None
    for word in arguments:
        name, eq, value = word.partition("=")
        if word.startswith("--") and eq and PLACEHOLDER.match(value):
            out.append(f"{name}={sample_value(by_spelling.get(name))}")
        elif PLACEHOLDER.match(word):   # an option's value, or an argument (the arguments take any path)
            out.append(sample_value(previous))
        else:
            out.append(word)
        option = by_spelling.get(word)
        previous = option if option is not None and not option.is_flag and not option.count else None
    return out


def parse_command_line(arguments: list[str]) -> None:
    """Resolve the subcommand path and parse its arguments as click would; nothing is invoked.
    Raises click's exception for an unknown command or option, a bad value or a missing argument."""
    parent = click.Context(cli, info_name="worldpager", **cli.context_settings)
    command, name, rest = cli, "worldpager", list(arguments)
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        name, command, rest = command.resolve_command(parent, rest)
        parent = click.Context(command, info_name=name, parent=parent)
    rest = with_sample_values(command, parent, rest)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            command.make_context(name, rest, parent=parent.parent, resilient_parsing=False)
    except click.exceptions.Exit as done:   # --help, --version: printed and exited
        if done.exit_code != 0:
            raise


def test_the_docs_have_command_lines_to_check():
    commands = {tuple(a[:1]) for _, a in documented_command_lines()}
    assert {("generate",), ("resume",), ("fork",), ("batch",), ("plan",), ("bench",)} <= commands


def test_every_documented_command_line_parses(monkeypatch):
    monkeypatch.chdir(ROOT)   # paths that must exist (bench quality --from-rows) are the checkout's
    for name in [n for n in os.environ if n.startswith("WORLDPAGER_")]:
        monkeypatch.delenv(name)
    failures = []
    for where, arguments in documented_command_lines():
        try:
            parse_command_line(arguments)
        except (click.ClickException, click.exceptions.Exit) as exc:
            message = exc.format_message() if isinstance(exc, click.ClickException) else f"exit {exc.exit_code}"
            failures.append(f"{where}\n      {' '.join(message.split())}")
    assert not failures, "command lines in the docs that do not parse:\n  " + "\n  ".join(failures)


@pytest.mark.parametrize("line", [
    "worldpager generate --no-such-flag",
    "worldpager generate --store nowhere",
    "worldpager generate --chunks two",
    "worldpager bench nothing",
    "worldpager nothing",
    "worldpager resume",
])
def test_a_stale_command_line_fails_the_check(line):
    (words,) = simple_commands(line)
    with pytest.raises(click.ClickException):
        parse_command_line(worldpager_arguments(words))


@pytest.mark.parametrize("line", [
    "WORLDPAGER_KERNELS=reference nice -n 10 worldpager generate --spill DIR --chunks N \\",
    "worldpager plan --preset mg2-4090-32g | head -1",
    "worldpager generate --chunks 3 --out a.mp4 && worldpager arena truth a.log.jsonl --out t.mp4",
    "worldpager fork $PARENT --trajectory <path> --out b.mp4 --at=$CHUNK   # a comment --bad",
    "worldpager generate --store=$MODE --chunks N --spill DIR --late-prefetch <mode>",
    "worldpager generate -h",
    "worldpager plan > /dev/full",
])
def test_shell_forms_parse(line):
    commands = [worldpager_arguments(words) for words in simple_commands(line.rstrip("\\ "))]
    for arguments in [a for a in commands if a is not None]:
        parse_command_line(arguments)


# ---------------------------------------------------------------------------------------------
# (c) relative links resolve, (d) the front page is short


def relative_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    targets = [a or b for a, b in LINK.findall(text)]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_every_relative_link_points_to_a_file():
    broken = []
    for page in doc_pages():
        for target in relative_links(page):
            resolved = (page.parent / target.split("#")[0]).resolve()
            name = resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else str(resolved)
            if not resolved.exists() and name not in PENDING_PAGES:
                broken.append(f"{page.relative_to(ROOT)}: ({target})")
    assert not broken, "links to files that do not exist:\n  " + "\n  ".join(broken)


def test_the_front_page_is_short():
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= FRONT_PAGE_MAX_LINES, f"README.md has {lines} lines; at most {FRONT_PAGE_MAX_LINES}"


def test_the_front_page_gives_the_test_command_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    command = ci[ci.index("# The README's test command:") + 1].strip()
    blocks = [text for _, text in shell_blocks(ROOT / "README.md")]
    assert any(command in block.splitlines() for block in blocks), \
        f"README.md has no shell block with .ci/run's test command: {command}"


def test_ci_runs_the_front_pages_run_command_in_a_fresh_venv():
    """What a new user runs: a fresh venv with the pinned CPU torch inside it, then the Run command."""
    text = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    run = text.index("# The README's run command")
    assert '"$repo/scripts/install.sh" && worldpager generate' in text[run:text.index("# The README's test command")]
    blocks = [text for _, text in shell_blocks(ROOT / "README.md")]
    assert any(line.split("#")[0].strip() == "scripts/install.sh && worldpager generate"
               for block in blocks for line in block.splitlines())
    order = [text.index(step) for step in ("python3 -m venv", "/venv/bin/activate", "install --quiet torch==2.13.0")]
    assert order == sorted(order) and order[-1] < run


def test_ci_checks_that_play_serves_its_page_on_the_run_commands_install():
    """`play` works after the Run command alone: .ci/run serves its page before the test extras go in."""
    text = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    smoke = text.index("python3 scripts/play_smoke.py")
    assert text.index("worldpager generate)") < smoke < text.index("pip install -e '.[test]'")
    assert (ROOT / "scripts" / "play_smoke.py").is_file()
