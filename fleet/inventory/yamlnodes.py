"""Line-aware YAML reading: compose a file safely, turn nodes into values that know their line."""

from __future__ import annotations

import difflib
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from fleet.errors import ConfigError

NULL_TAG = "tag:yaml.org,2002:null"
BOOL_TAG = "tag:yaml.org,2002:bool"
INT_TAG = "tag:yaml.org,2002:int"
STR_TAG = "tag:yaml.org,2002:str"
MERGE_TAG = "tag:yaml.org,2002:merge"
# The most values one raw mapping (`settings`) may hold once its aliases are expanded.
MAX_VALUES = 100_000
# A line that is only `[name]`: an INI section header, which YAML cannot follow with plain lines.
_INI_SECTION = re.compile(r"^\[[^\]\n]+\][ \t]*$", re.MULTILINE)
# A line of an INI inventory naming a host with `key=value` variables (`gpu1 ansible_host=x`).
_INI_HOST_LINE = re.compile(r"^[ \t]*[^\s#;=:\[\]]+([ \t]+[A-Za-z_][A-Za-z0-9_]*=\S*)+[ \t]*$",
                            re.MULTILINE)
INI_HINT = ("this looks like an INI file (`[group]` sections), and fleet reads "
            "YAML: `ansible-inventory -i FILE --list --yaml` converts one")
# The largest inventory file read (about 200,000 hosts written out one by one); checked with
# stat() before reading, so a huge file is refused at once instead of exhausting memory.
MAX_INVENTORY_BYTES = 16 * 1024 * 1024
# The most nodes a document may amount to once every alias is expanded where it is used: an
# alias costs its target's whole size each time fleet walks it (a "billion laughs" bomb).
MAX_EXPANDED_NODES = 4_000_000
# libyaml's parser when PyYAML was built with it (about 8x faster); its nodes carry line marks too.
COMPOSE_LOADER: type[yaml.SafeLoader] | type[yaml.CSafeLoader] = getattr(
    yaml, "CSafeLoader", yaml.SafeLoader
)


def line_of(node: yaml.Node) -> int:
    """The 1-based line where `node` starts."""
    return int(node.start_mark.line) + 1


def is_null(node: yaml.Node) -> bool:
    """Whether `node` is an empty value (`key:` with nothing, `~` or `null`)."""
    return isinstance(node, yaml.ScalarNode) and node.tag == NULL_TAG


def closest(word: str, choices: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the closest of `choices`, or an empty string."""
    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {matches[0]!r}?)" if matches else ""


@dataclass(frozen=True)
class Entry:
    """One `key: value` pair of a YAML mapping; `key_node` gives the key's line."""

    key: str
    key_node: yaml.Node
    value: yaml.Node

    @property
    def line(self) -> int:
        """The line of the key."""
        return line_of(self.key_node)


class YamlFile:
    """One composed YAML file, named as the user named it, that turns nodes into checked values."""

    def __init__(self, display_path: str) -> None:
        self.path = display_path
        self._constructor = yaml.constructor.SafeConstructor()
        # Set by compose when the document is not a mapping and its text reads as INI.
        self.ini_hint = ""

    def compose(self, text: str) -> yaml.Node:
        """The single document in `text`; ConfigError on a syntax error or an empty file."""
        root = self.compose_optional(text)
        if root is None:
            raise ConfigError("the file is empty (no hosts, groups or settings)", path=self.path)
        return root

    def compose_optional(self, text: str) -> yaml.Node | None:
        """The single document in `text`, None when it is empty (nothing, `~` or `null`);
        ConfigError on a syntax error."""
        try:
            root = yaml.compose(text, Loader=COMPOSE_LOADER)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark is not None else None
            problem = exc.problem or exc.context or "invalid YAML"
            if _INI_SECTION.search(text):
                problem += f"; {INI_HINT}"
            raise ConfigError(f"YAML syntax error: {problem}", path=self.path, line=line) from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"YAML error: {exc}", path=self.path) from exc
        if root is None or is_null(root):
            return None
        # INI text that YAML happens to read (a lone `[group]` is a list, `host var=x` lines a
        # string) is named as INI when the top level is not a mapping: see top_level_error.
        if not isinstance(root, yaml.MappingNode) and (
            _INI_SECTION.search(text) or _INI_HOST_LINE.search(text)
        ):
            self.ini_hint = INI_HINT
        # Without a `*` anywhere the document has no alias: no cycle, no expansion to check.
        if "*" in text:
            self._check_aliases(root)
        return root

    def _check_aliases(self, root: yaml.Node) -> None:
        """ConfigError when an alias refers to a node that contains it (a recursive structure),
        or when expanding every alias would exceed MAX_EXPANDED_NODES nodes."""
        # Expanded size of each finished node, by id; children finish before their parents.
        sizes: dict[int, int] = {}
        on_path: set[int] = set()
        # Depth-first walk without recursion: (node, whether its children were pushed).
        stack: list[tuple[yaml.Node, bool]] = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                on_path.discard(id(node))
                size = 1 + sum(sizes[id(child)] for child in _children(node))
                if size > MAX_EXPANDED_NODES:
                    raise self.error(
                        node,
                        f"aliases expand this value to more than {MAX_EXPANDED_NODES:,} "
                        "YAML nodes (an alias bomb?)",
                    )
                sizes[id(node)] = size
                continue
            if id(node) in sizes:
                continue
            if id(node) in on_path:
                raise self.error(node, "recursive alias: a value contains itself")
            on_path.add(id(node))
            stack.append((node, True))
            for child in _children(node):
                if id(child) in on_path:
                    raise self.error(child, "recursive alias: a value contains itself")
                if id(child) not in sizes:
                    stack.append((child, False))

    def top_level_error(self, root: yaml.Node, what: str) -> ConfigError:
        """The error for a top level that is not a mapping, naming INI text as such."""
        hint = f"; {self.ini_hint}" if self.ini_hint else ""
        return self.error(root, f"{what} must be a mapping, not {kind(root)}{hint}")

    def error(self, node: yaml.Node | None, message: str) -> ConfigError:
        """A ConfigError about `node`, naming this file and the node's line."""
        return ConfigError(message, path=self.path, line=None if node is None else line_of(node))

    def source(self, node: yaml.Node) -> str:
        """`FILE:LINE` for `node`."""
        return f"{self.path}:{line_of(node)}"

    def mapping(self, node: yaml.Node, what: str) -> list[Entry]:
        """The entries of a mapping node (empty for null), merge keys (`<<`) applied.

        A key written twice in the same mapping is an error; keys that come from a merge are
        overridden by the mapping's own keys, as YAML specifies.
        """
        if is_null(node):
            return []
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, f"{what} must be a mapping (key: value), not {kind(node)}")
        own: dict[str, Entry] = {}
        merged: dict[str, Entry] = {}
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                for source in self._merge_sources(value_node):
                    for entry in self.mapping(source, "a merged mapping (<<)"):
                        merged.setdefault(entry.key, entry)
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.error(
                    key_node, f"keys in {what} must be plain names, not {kind(key_node)}"
                )
            key = str(key_node.value)
            if key in own:
                raise self.error(
                    key_node, f"duplicate key {key!r} in {what} (first at line {own[key].line})"
                )
            own[key] = Entry(key, key_node, value_node)
        return [entry for key, entry in merged.items() if key not in own] + list(own.values())

    def _merge_sources(self, node: yaml.Node) -> list[yaml.Node]:
        """The mappings a `<<:` value names: one alias or a list of them."""
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        return [node]

    def check_keys(self, entries: Iterable[Entry], allowed: Iterable[str], what: str) -> None:
        """ConfigError for the first key not in `allowed`, suggesting the closest valid key."""
        known = frozenset(allowed)
        for entry in entries:
            if entry.key not in known:
                valid = sorted(known)
                raise self.error(
                    entry.key_node,
                    f"unknown key {entry.key!r} in {what}{closest(entry.key, valid)}; "
                    f"valid keys: {', '.join(valid)}",
                )

    def sequence(self, node: yaml.Node, what: str) -> list[yaml.Node]:
        """The items of a sequence node (empty for null)."""
        if is_null(node):
            return []
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(node, f"{what} must be a list, not {kind(node)}")
        return list(node.value)

    def scalar(self, node: yaml.Node, what: str) -> object:
        """The Python value of a scalar node (str, int, float, bool, None, date)."""
        if not isinstance(node, yaml.ScalarNode):
            raise self.error(node, f"{what} must be a single value, not {kind(node)}")
        if node.tag == STR_TAG:
            return node.value  # what the constructor returns for a string, without its overhead
        try:
            return self._constructor.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise self.error(node, f"{what}: {exc}") from exc

    def text(self, node: yaml.Node, what: str) -> str:
        """A non-empty string value; numbers are accepted as their text, other types are errors."""
        value = self.scalar(node, what)
        if isinstance(value, bool) or value is None or not isinstance(value, str | int | float):
            raise self.error(node, f"{what} must be a string, not {kind(node)}")
        result = str(node.value) if not isinstance(value, str) else value
        if not result.strip():
            raise self.error(node, f"{what} must not be empty")
        return result

    def to_python(self, node: yaml.Node, what: str) -> object:
        """Plain dict/list/scalar data for `node`, keys as strings, duplicate keys rejected.

        Aliases are expanded, so a budget of MAX_VALUES values guards against alias bombs.
        """
        budget = [MAX_VALUES]
        return self._to_python(node, what, budget)

    def _to_python(self, node: yaml.Node, what: str, budget: list[int]) -> object:
        """to_python's recursion; `budget[0]` counts down the values still allowed."""
        budget[0] -= 1
        if budget[0] < 0:
            raise self.error(node, f"{what} expands to more than {MAX_VALUES} values")
        if isinstance(node, yaml.MappingNode):
            return {
                entry.key: self._to_python(entry.value, f"{what}.{entry.key}", budget)
                for entry in self.mapping(node, what)
            }
        if isinstance(node, yaml.SequenceNode):
            return [self._to_python(item, what, budget) for item in node.value]
        return self.scalar(node, what)


def _children(node: yaml.Node) -> list[yaml.Node]:
    """The nodes directly inside a mapping or sequence node."""
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def kind(node: yaml.Node) -> str:
    """What a node is, in words, for error messages."""
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    names = {
        NULL_TAG: "empty",
        BOOL_TAG: "a boolean",
        INT_TAG: "an integer",
        STR_TAG: "a string",
        "tag:yaml.org,2002:float": "a number",
    }
    return names.get(node.tag, f"a {node.tag.rsplit(':', 1)[-1]}")


def read_yaml_file(path: Path, display_path: str) -> tuple[YamlFile, yaml.Node]:
    """Read and compose the YAML file at `path`; ConfigError if missing, unreadable, larger
    than MAX_INVENTORY_BYTES or invalid."""
    source = YamlFile(display_path)
    return source, source.compose(read_text_file(path, display_path))


def read_text_file(path: Path, display_path: str, what: str = "inventory") -> str:
    """The UTF-8 text of the file at `path` (`what` names it in errors); ConfigError if
    missing, not a regular file, unreadable or larger than MAX_INVENTORY_BYTES."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"{what} file not found", path=display_path) from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what}: {exc.strerror}", path=display_path) from exc
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{what} path is not a regular file", path=display_path)
    if info.st_size > MAX_INVENTORY_BYTES:
        raise _too_large(display_path, info.st_size, what)
    try:
        with path.open("rb") as stream:
            # One byte more than the cap shows a file that grew after stat().
            data = stream.read(MAX_INVENTORY_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {what}: {exc.strerror}", path=display_path) from exc
    if len(data) > MAX_INVENTORY_BYTES:
        raise _too_large(display_path, len(data), what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} is not UTF-8 text: {exc.reason}", path=display_path) from exc


def _too_large(display_path: str, size: int, what: str = "inventory") -> ConfigError:
    """The error for an inventory file over MAX_INVENTORY_BYTES."""
    return ConfigError(
        f"{what} file is too large: {size:,} bytes ({size / 2**20:.1f} MiB), over fleet's "
        f"limit of {MAX_INVENTORY_BYTES:,} bytes ({MAX_INVENTORY_BYTES // 2**20} MiB)",
        path=display_path,
    )
