"""Every `fleet …` the README and the --help texts show names real commands and options, and
every example written out in full parses as the CLI would parse it."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import click.testing
import pytest

from fleet.cli.main import cli
from tests.fixtures.cli_commands import leaf_commands

README = Path(__file__).resolve().parents[2] / "README.md"
_INLINE = re.compile(r"`(fleet [^`\n]*)`")
_FENCE = re.compile(r"^```")
_OPTION = re.compile(r"^-{1,2}[A-Za-z][\w-]*")
# Words after which a synopsis names the script's own arguments, not fleet's options.
_SCRIPT = re.compile(r"^(SCRIPT|CMD\.*|\S+\.(py|sh))$")


@dataclass(frozen=True)
class Mention:
    """One `fleet …` in a document: where, its text, and whether it is a whole example."""

    where: str
    text: str
    example: bool  # a line of a code block or a --help example, not a reference in prose


def readme_mentions() -> Iterator[Mention]:
    in_block = False
    for number, line in enumerate(README.read_text().splitlines(), start=1):
        if _FENCE.match(line.strip()):
            in_block = not in_block
            continue
        where = f"README.md:{number}"
        if in_block:
            text = re.sub(r"^\$ |^ExecStart=|^\S*/(?=fleet )", "", line.strip())
            if text.startswith("fleet "):
                yield Mention(where, re.sub(r"\s+#.*$", "", text), example=True)
        else:
            for match in _INLINE.finditer(line):
                yield Mention(where, match.group(1), example=False)


def help_examples() -> Iterator[Mention]:
    runner = click.testing.CliRunner()
    paths = ["fleet", *(path for path, _ in leaf_commands(cli))]
    for path in paths:
        output = runner.invoke(cli, [*path.split()[1:], "--help"]).output
        examples = output.split("Example", 1)[1].split("\n\n", 1)[0]  # to the blank line
        for line in examples.splitlines()[1:]:
            text = re.split(r"\s{2,}", line.strip())[0]  # the top help explains each to the right
            if text.startswith("fleet "):
                yield Mention(f"`{path} --help`", text, example=True)


def _command(words: list[str]) -> tuple[click.Command, list[str], list[str], list[str]]:
    """(leaf command, its path, fleet's own options before it, the words after it); a group
    named alone (a reference to `fleet history`) is its own leaf."""
    global_words: list[str] = []
    if words[:1] in (["--help"], ["-h"]):
        return cli, ["fleet"], words, []
    while words and words[0].startswith("-"):
        option = _find_option(cli, words[0])
        assert option is not None, f"fleet has no option {words[0]}"
        takes_value = not option.is_flag and not option.count
        global_words += words[: 2 if takes_value else 1]
        words = words[2 if takes_value else 1:]
    command: click.Command = cli
    path = ["fleet"]
    while isinstance(command, click.Group) and words:
        sub = command.get_command(click.Context(command), words[0])
        assert sub is not None, f"{' '.join(path)} has no command {words[0]!r}"
        path.append(words.pop(0))
        command = sub
    return command, path, global_words, words


def _find_option(command: click.Command, name: str) -> click.Option | None:
    for param in command.params:
        if isinstance(param, click.Option) and name in (*param.opts, *param.secondary_opts):
            return param
    return None


def _shell_words(text: str) -> list[str]:
    """An example's words as the shell gives them to fleet: up to a pipe or redirection, with
    `$(…)` and `<placeholder>` standing for one word each."""
    text = re.sub(r"\$\([^)]*\)|<[^>]*>", "X", text)
    lexer = shlex.shlex(text, posix=True, punctuation_chars="|&;<>")
    lexer.whitespace_split = True
    words = []
    for word in lexer:
        if word and set(word) <= set("|&;<>"):
            break
        words.append(word)
    return words[1:]


def _alternatives(text: str) -> list[list[str]]:
    """A reference's command words, one list per `a|b` alternative in its command path."""
    words = re.sub(r"<[^>]*>", "X", text).split()[1:]
    variants: list[list[str]] = [[]]
    for index, word in enumerate(words):
        if index < 3 and re.fullmatch(r"[a-z-]+(\|[a-z-]+)+", word):  # `fleet history gpus|hosts`
            variants = [[*variant, choice] for variant in variants for choice in word.split("|")]
        else:
            variants = [[*variant, word] for variant in variants]
    return variants


def check_reference(text: str) -> None:
    """The command exists and every option the text names before the script's words is one it
    (or fleet itself) takes."""
    for words in _alternatives(text):
        command, path, _global, rest = _command(words)
        for word in rest:
            bare = word.strip("[]()…").split("=", 1)[0]
            if bare == "--" or _SCRIPT.match(bare):
                break  # what follows belongs to the remote command or the script
            named = _OPTION.match(bare)
            if named and not named.group(0).endswith("-"):
                option = named.group(0)
                assert (_find_option(command, option) or _find_option(cli, option)
                        or option in ("-h", "--help")), f"{' '.join(path)} has no option {option}"


def check_example(text: str) -> None:
    """The example parses as fleet's command line would (values converted, nothing run)."""
    command, path, global_words, rest = _command(_shell_words(text))
    if command is cli:
        return  # `fleet --help`
    context = cli.make_context("fleet", [*global_words, path[1]])
    group: click.Command = cli
    for index, name in enumerate(path[1:-1], start=1):  # a nested group: `fleet db copy`
        assert isinstance(group, click.Group)
        sub = group.get_command(context, name)
        assert sub is not None
        context = sub.make_context(name, [path[index + 1]], parent=context)
        group = sub
    try:
        command.make_context(path[-1], rest, parent=context)
    except click.BadParameter as error:
        if "does not exist" not in str(error):  # the user's own files: train.py, grid.txt
            raise


MENTIONS = [*readme_mentions(), *help_examples()]


def test_the_documents_show_enough_commands_to_check() -> None:
    assert sum(1 for mention in MENTIONS if mention.example) >= 60
    assert sum(1 for mention in MENTIONS if not mention.example) >= 150


@pytest.mark.parametrize("mention", MENTIONS, ids=lambda mention: mention.where)
def test_every_shown_command_names_real_commands_and_options(
        mention: Mention, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        if mention.example:
            monkeypatch.chdir(tmp_path)
            check_example(mention.text)
        else:
            check_reference(mention.text)
    except (AssertionError, click.ClickException) as error:
        raise AssertionError(f"{mention.where}: {mention.text!r}: {error}") from error


def test_a_mistyped_option_or_command_is_caught() -> None:
    with pytest.raises(AssertionError, match="has no option --gpu-count"):
        check_reference("fleet dispatch [--gpu-count N] SCRIPT")
    with pytest.raises(AssertionError, match="has no command 'gpu'"):
        check_reference("fleet history gpu --since 1h")
    with pytest.raises(click.NoSuchOption):
        check_example("fleet status --hots 'gpu*' --json | jq .hosts")
    with pytest.raises(click.BadParameter):
        check_example("fleet run --fanout many -- uptime")
    check_example("fleet status --json | jq '.hosts[] | .name' > names.txt")
    check_reference("fleet dispatch --gpus 1 sweep.py --lr {lr}")  # the script's own option
    check_reference("fleet history gpus|hosts")


def test_the_readme_documents_every_command_and_option() -> None:
    readme = README.read_text()
    undocumented = []
    for path, command in leaf_commands(cli):
        if f"`{path}" not in readme:
            undocumented.append(path)
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden and not any(
                    re.search(re.escape(name) + r"(?![\w-])", readme) for name in param.opts):
                undocumented.append(f"{path} {param.opts[-1]}")
    assert undocumented == []
