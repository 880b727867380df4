"""Trims pynvml's source to the top-level statements the probe uses, each kept as written."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass

# The name the probe binds the shipped binding to (remote.py's global `pynvml`).
PROBE_MODULE_NAME = "pynvml"
# Module-level calls left out although module-level calls are otherwise always kept: pynvml's
# error-class factory (one NVMLError subclass per NVML_ERROR_* code). The probe names an error
# from its code (remote.py's _nvml_error_name), and the factory needs `import string`, whose `re`
# import and compiled string.Template pattern are a quarter of a probe's host CPU (14.5 M of
# 58.9 M instructions for the bootstrap's and the binding's imports under Debian's python3.11).
SKIPPED_CALLS = frozenset({"_extractNVMLErrorsAsClasses"})


@dataclass(frozen=True)
class _Chunk:
    """One or more top-level statements that share source lines: kept or dropped together."""

    first_line: int  # 1-based, decorators included
    last_line: int
    statements: tuple[ast.stmt, ...]

    @property
    def binds(self) -> frozenset[str]:
        """Top-level names these statements define or assign (attribute targets: the base)."""
        names: set[str] = set()
        for statement in self.statements:
            names.update(_bound_names(statement))
        return frozenset(names)

    def always_kept(self, skipped_calls: frozenset[str]) -> bool:
        """Statements kept whatever is used: module-level calls (but a bare call of a function
        named in `skipped_calls`) and anything not a plain definition, assignment or import
        (whose effect a name analysis cannot see)."""
        for statement in self.statements:
            if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                continue  # a bare string (documentation): no effect
            if _is_skipped_call(statement, skipped_calls):
                continue
            if isinstance(statement, ast.ImportFrom) and any(
                alias.name == "*" for alias in statement.names
            ):
                return True  # binds names nobody can list here
            if not isinstance(statement, _DEFINITIONS):
                return True
        return False


def _is_skipped_call(statement: ast.stmt, skipped_calls: frozenset[str]) -> bool:
    """Whether the statement is `NAME()` alone, NAME one of `skipped_calls`."""
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Call)
        and isinstance(statement.value.func, ast.Name)
        and statement.value.func.id in skipped_calls
    )


_DEFINITIONS = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Assign,
    ast.AnnAssign,
    ast.AugAssign,
    ast.Import,
    ast.ImportFrom,
)


def _target_names(target: ast.expr) -> Iterable[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Attribute | ast.Subscript | ast.Starred):
        yield from _target_names(target.value)
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _target_names(element)


def _bound_names(statement: ast.stmt) -> Iterable[str]:
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        yield statement.name
    elif isinstance(statement, ast.Assign):
        for target in statement.targets:
            yield from _target_names(target)
    elif isinstance(statement, ast.AnnAssign | ast.AugAssign):
        yield from _target_names(statement.target)
    elif isinstance(statement, ast.Import | ast.ImportFrom):
        for alias in statement.names:
            if alias.name != "*":
                yield alias.asname or alias.name.split(".")[0]


def _references(node: ast.AST) -> tuple[set[str], set[str]]:
    """(names and identifier-like strings the node mentions, prefixes it tests with
    startswith): the second covers code that looks its module's names up dynamically, as
    pynvml's error-class factory does with dir() and startswith("NVML_ERROR_")."""
    names: set[str] = set()
    prefixes: set[str] = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            names.add(child.id)
        elif isinstance(child, ast.Attribute):
            names.add(child.attr)  # module.NAME via sys.modules[__name__], conservatively
        elif isinstance(child, ast.Constant) and isinstance(child.value, str):
            if child.value.isidentifier():
                names.add(child.value)  # getattr(module, "NAME")
        elif (
            isinstance(child, ast.Call)
            and isinstance(child.func, ast.Attribute)
            and child.func.attr == "startswith"
            and child.args
        ):
            prefix = child.args[0]
            if isinstance(prefix, ast.Constant) and isinstance(prefix.value, str):
                prefixes.add(prefix.value)
    return names, prefixes


def _chunks(tree: ast.Module) -> list[_Chunk]:
    chunks: list[_Chunk] = []
    for statement in tree.body:
        decorators = getattr(statement, "decorator_list", [])
        first = min([statement.lineno, *(d.lineno for d in decorators)])
        last = statement.end_lineno or statement.lineno
        if chunks and first <= chunks[-1].last_line:  # `a = 1; b = 2` on one line
            previous = chunks.pop()
            chunks.append(
                _Chunk(
                    previous.first_line,
                    max(last, previous.last_line),
                    (*previous.statements, statement),
                )
            )
        else:
            chunks.append(_Chunk(first, last, (statement,)))
    return chunks


def prefixes_used_by_probe(probe_source: str) -> set[str]:
    """Prefixes the probe looks the binding's names up by (`name.startswith("NVML_ERROR_")`
    over `dir(pynvml)`): every name of the binding with one is kept."""
    return _references(ast.parse(probe_source))[1]


def names_used_by_probe(probe_source: str, module_name: str = PROBE_MODULE_NAME) -> set[str]:
    """Names the probe may look up on the binding: `pynvml.NAME` attributes, plus every
    identifier-like string constant (`getattr(pynvml, "NAME", None)`, names in a tuple)."""
    used: set[str] = set()
    for node in ast.walk(ast.parse(probe_source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == module_name:
                used.add(node.attr)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.isidentifier()
        ):
            used.add(node.value)
    return used


def trim_module(
    source: str,
    roots: set[str],
    root_prefixes: Iterable[str] = (),
    skipped_calls: frozenset[str] = frozenset(),
) -> str:
    """`source` with only the top-level statements that `roots` and the names starting with
    `root_prefixes` need, transitively, plus the ones always kept (module-level calls but those
    of `skipped_calls`, star imports), in their original order and text."""
    chunks = _chunks(ast.parse(source))
    lines = source.splitlines(keepends=True)
    binders: dict[str, list[int]] = {}
    for position, chunk in enumerate(chunks):
        for name in chunk.binds:
            binders.setdefault(name, []).append(position)
    kept: set[int] = set()
    pending = [
        position for position, chunk in enumerate(chunks) if chunk.always_kept(skipped_calls)
    ]
    wanted = set(roots)
    wanted.update(name for name in binders if name.startswith(tuple(root_prefixes)))
    seen_names: set[str] = set()
    seen_prefixes: set[str] = set()
    while pending or wanted - seen_names:
        for name in sorted(wanted - seen_names):
            seen_names.add(name)
            pending.extend(binders.get(name, []))
        while pending:
            position = pending.pop()
            if position in kept:
                continue
            kept.add(position)
            for statement in chunks[position].statements:
                names, prefixes = _references(statement)
                wanted.update(names)
                for prefix in prefixes - seen_prefixes:
                    seen_prefixes.add(prefix)
                    wanted.update(name for name in binders if name.startswith(prefix))
    pieces = []
    for position in sorted(kept):
        chunk = chunks[position]
        pieces.append("".join(lines[chunk.first_line - 1 : chunk.last_line]))
    return "\n".join(pieces)


def trim_pynvml(pynvml_source: str, probe_source: str) -> str:
    """The pynvml source trimmed to what the probe program (remote.py's source) uses."""
    return trim_module(pynvml_source, names_used_by_probe(probe_source),
                       prefixes_used_by_probe(probe_source), SKIPPED_CALLS)
