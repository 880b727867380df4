"""The dependency direction db <- fleet <- tui holds, imports by string included; no import cycles.

The checks read the source with `ast`: every `import`/`from … import` at any nesting, and the
string argument of `importlib.import_module("…")` / `__import__("…")`, which a static import
scan would otherwise miss. The cycle check uses only imports that run when a module is loaded
(module level, outside `if TYPE_CHECKING:`).
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The one module under fleet/ that may import the UI layer: the `fleet tui` launcher.
TUI_LAUNCHERS = frozenset({"fleet/cli/tui_launch.py"})
DYNAMIC_IMPORTERS = frozenset({"import_module", "__import__"})


def module_name(root: Path, path: Path) -> str:
    """The dotted module name of a file under `root` (a package's __init__ is the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve_relative(current: str, is_package: bool, level: int, module: str | None) -> str:
    base = current.split(".") if is_package else current.split(".")[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, module] if module else base)


def _dynamic_target(node: ast.Call) -> str | None:
    """"x.y" for importlib.import_module("x.y") / import_module("x.y") / __import__("x.y")."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in DYNAMIC_IMPORTERS or not node.args:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return None if first.value.startswith(".") else first.value
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _load_time_nodes(tree: ast.Module) -> Iterator[ast.AST]:
    """Nodes that run when the module is imported: not in function bodies or TYPE_CHECKING."""
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            # Decorators and defaults run at import time; the body does not.
            pending.extend(node.decorator_list if not isinstance(node, ast.Lambda) else [])
            pending.extend(node.args.defaults)
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            pending.extend(node.orelse)
            continue
        yield node
        pending.extend(ast.iter_child_nodes(node))


def imported_modules(root: Path, path: Path, *, load_time_only: bool = False) -> set[str]:
    """Dotted names a file imports; `from a import b` also yields `a.b` (b may be a module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    current = module_name(root, path)
    is_package = path.name == "__init__.py"
    nodes: Iterable[ast.AST] = _load_time_nodes(tree) if load_time_only else ast.walk(tree)
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = _resolve_relative(current, is_package, node.level, node.module)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call) and (target := _dynamic_target(node)) is not None:
            names.add(target)
    return names


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def layer_violations(root: Path, package: str, forbidden: Iterable[str],
                     allowed: dict[str, set[str]] | None = None) -> dict[str, list[str]]:
    """{file: forbidden modules it imports} for every file of `package` under `root`.

    `allowed` maps a file (relative to root) to forbidden packages it may import anyway.
    """
    offenders: dict[str, list[str]] = {}
    for path in sorted((root / package).rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        exempt = (allowed or {}).get(relative, set())
        hits = sorted(
            name for name in imported_modules(root, path)
            if any(_within(name, banned) for banned in forbidden)
            and not any(_within(name, ok) for ok in exempt)
        )
        if hits:
            offenders[relative] = hits
    return offenders


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Load-time import edges between the modules of `package` (only edges to its own files)."""
    modules = {module_name(root, path): path for path in (root / package).rglob("*.py")}
    return {
        name: {target for target in imported_modules(root, path, load_time_only=True)
               if target in modules and target != name}
        for name, path in modules.items()
    }


def cycles_through(graph: dict[str, set[str]], watched: Iterable[str]) -> list[list[str]]:
    """The import cycles (strongly connected components of 2+ modules) that touch `watched`."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    watched_set = set(watched)
    return [component for component in components if watched_set & set(component)]


# -- the rules, on this repository ------------------------------------------------------------


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("db", {"fleet", "tui", "asyncssh", "zeroconf", "textual", "pynvml"}),
        ("fleet", {"tui", "textual"}),
    ],
)
def test_package_does_not_import_upper_layers(package: str, forbidden: set[str]) -> None:
    allowed = {launcher: {"tui"} for launcher in TUI_LAUNCHERS}
    assert layer_violations(ROOT, package, forbidden, allowed) == {}


def test_only_the_cli_imports_fleet_cli() -> None:
    offenders = {
        path: names for path, names in layer_violations(ROOT, "fleet", {"fleet.cli"}).items()
        if not path.startswith("fleet/cli/")
    }
    assert offenders == {}


def test_tui_talks_only_to_fleet_service_api() -> None:
    assert layer_violations(ROOT, "tui", {"db", "asyncssh", "sqlalchemy", "zeroconf"}) == {}


def test_cli_reaches_storage_only_through_the_service_layer() -> None:
    """Front ends name stored records through fleet.records and never open the database."""
    assert layer_violations(ROOT, "fleet/cli", {"db", "sqlalchemy"}) == {}


def test_no_import_cycle_through_the_service_layer_or_dispatch() -> None:
    graph = import_graph(ROOT, "fleet")
    watched = [name for name in graph
               if name == "fleet.service" or _within(name, "fleet.services")
               or _within(name, "fleet.dispatch")
               or name in ("fleet.cli.dispatch_cmd", "fleet.cli.tasks_cmd")]
    assert "fleet.service" in watched and "fleet.dispatch.lifecycle" in watched
    assert cycles_through(graph, watched) == []


# What the services are built from never names the facade composed over them.
FACADE = "fleet.service"
BELOW_THE_FACADE = ("fleet/services", "fleet/dispatch", "fleet/context.py")


def facade_back_imports(root: Path) -> dict[str, list[str]]:
    """{file: imports of fleet.service} under BELOW_THE_FACADE, at any nesting: function
    bodies, `if TYPE_CHECKING:` blocks and import-by-string included (a service takes the
    context, so it has no use for `Fleet`, not even as an annotation)."""
    offenders: dict[str, list[str]] = {}
    for below in BELOW_THE_FACADE:
        target = root / below
        paths = [target] if target.suffix == ".py" else sorted(target.rglob("*.py"))
        for path in paths:
            hits = sorted(name for name in imported_modules(root, path)
                          if _within(name, FACADE))
            if hits:
                offenders[path.relative_to(root).as_posix()] = hits
    return offenders


def test_services_dispatch_and_context_never_import_the_facade() -> None:
    assert (ROOT / "fleet" / "service.py").is_file()
    assert facade_back_imports(ROOT) == {}


def test_dispatch_and_tasks_commands_do_not_import_each_other() -> None:
    """Not even inside a function: what both need lives in a neutral module."""
    dispatch_cmd = ROOT / "fleet" / "cli" / "dispatch_cmd.py"
    tasks_cmd = ROOT / "fleet" / "cli" / "tasks_cmd.py"
    from_dispatch = imported_modules(ROOT, dispatch_cmd)
    from_tasks = imported_modules(ROOT, tasks_cmd)
    assert not {name for name in from_dispatch if _within(name, "fleet.cli.tasks_cmd")}
    assert not {name for name in from_tasks if _within(name, "fleet.cli.dispatch_cmd")}


# -- the checkers themselves catch what they are for ------------------------------------------


def _copy_module(tmp_path: Path, relative: str, extra: str) -> Path:
    target = tmp_path / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / relative, target)
    target.write_text(target.read_text() + extra)
    return target


@pytest.mark.parametrize("planted", [
    'import importlib\nimportlib.import_module("tui.app")\n',
    'from importlib import import_module\n\ndef launch() -> None:\n'
    '    import_module("tui.app")\n',
    'def launch() -> None:\n    __import__("textual.app")\n',
])
def test_checker_sees_imports_by_string(tmp_path: Path, planted: str) -> None:
    _copy_module(tmp_path, "fleet/textsafe.py", "\n" + planted)
    _copy_module(tmp_path, "fleet/timeparse.py", "")

    offenders = layer_violations(tmp_path, "fleet", {"tui", "textual"})

    assert list(offenders) == ["fleet/textsafe.py"]
    assert offenders["fleet/textsafe.py"][0] in ("tui.app", "textual.app")


def test_checker_allows_tui_only_in_the_launcher(tmp_path: Path) -> None:
    planted = 'import importlib\nimportlib.import_module("tui.app")\n'
    (tmp_path / "fleet" / "cli").mkdir(parents=True)
    (tmp_path / "fleet" / "cli" / "tui_launch.py").write_text(planted)
    (tmp_path / "fleet" / "cli" / "tui_cmd.py").write_text(planted)

    offenders = layer_violations(tmp_path, "fleet", {"tui"}, {"fleet/cli/tui_launch.py": {"tui"}})

    assert offenders == {"fleet/cli/tui_cmd.py": ["tui.app"]}


def test_checker_sees_fleet_cli_imported_from_the_engine(tmp_path: Path) -> None:
    _copy_module(tmp_path, "fleet/textsafe.py", "\nfrom fleet.cli.context import echo_json\n")
    assert layer_violations(tmp_path, "fleet", {"fleet.cli"}) == {
        "fleet/textsafe.py": ["fleet.cli.context", "fleet.cli.context.echo_json"]}


@pytest.mark.parametrize(("relative", "planted"), [
    ("fleet/services/dispatch.py",
     "\n\ndef _facade() -> object:\n    from fleet.service import Fleet\n\n    return Fleet\n"),
    ("fleet/dispatch/lifecycle.py",
     "\n\nasync def _facade() -> None:\n    from fleet import service\n\n    del service\n"),
    ("fleet/context.py", "\nif TYPE_CHECKING:\n    from fleet.service import Fleet\n"),
    ("fleet/services/placement.py",
     '\n\ndef _facade() -> None:\n    __import__("fleet.service")\n'),
])
def test_checker_sees_a_function_level_back_import_of_the_facade(
    tmp_path: Path, relative: str, planted: str
) -> None:
    for below in ("fleet/services/dispatch.py", "fleet/dispatch/lifecycle.py",
                  "fleet/context.py", "fleet/services/placement.py"):
        _copy_module(tmp_path, below, planted if below == relative else "")
    _copy_module(tmp_path, "fleet/service.py", "")  # the facade itself may import anything

    offenders = facade_back_imports(tmp_path)

    assert list(offenders) == [relative]
    assert any(name in ("fleet.service", "fleet.service.Fleet") for name in offenders[relative])


def test_cycle_finder_counts_load_time_imports_only(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("from pkg.c import thing\n")
    (package / "c.py").write_text("import pkg.a\nthing = 1\n")
    (package / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import e\n")
    (package / "e.py").write_text("def later() -> None:\n    from pkg import d\n")

    cycles = cycles_through(import_graph(tmp_path, "pkg"), ["pkg.a", "pkg.d", "pkg.e"])

    assert cycles == [["pkg.a", "pkg.b", "pkg.c"]]


# -- what a process actually loads ------------------------------------------------------------


def _modules_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                         text=True, cwd=ROOT).stdout
    return {name.split(".")[0] for name in json.loads(out.splitlines()[-1])}


def test_cli_import_loads_neither_textual_nor_heavy_libraries() -> None:
    every_command = ("import click, fleet.cli.main as m\n"
                     "[m.cli.get_command(click.Context(m.cli), n) for n in m.COMMANDS]")
    for code in ("import fleet.cli.main", every_command):
        loaded = _modules_after(code)
        assert not loaded & {"textual", "asyncssh", "sqlalchemy", "zeroconf", "pynvml", "tui"}


def test_a_command_imports_only_its_own_module() -> None:
    probe = ("import json, sys, fleet.cli.main as m\n"
             "try:\n    m.main(['status', '--help'])\nexcept SystemExit:\n    pass\n"
             "print(json.dumps(sorted(n for n in sys.modules if n.startswith('fleet.cli.'))))")
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                         text=True, cwd=ROOT).stdout
    loaded = {name for name in json.loads(out.splitlines()[-1]) if name.endswith("_cmd")}
    assert "fleet.cli.status_cmd" in loaded
    assert not loaded & {"fleet.cli.dispatch_cmd", "fleet.cli.tui_cmd", "fleet.cli.db_cmd"}


def test_renderers_load_no_heavy_library() -> None:
    modules = sorted(module_name(ROOT, path) for path in (ROOT / "fleet" / "render").glob("*.py"))
    loaded = _modules_after("\n".join(f"import {name}" for name in modules))
    assert not loaded & {"textual", "asyncssh", "sqlalchemy", "zeroconf", "pynvml", "tui", "db"}


def test_status_command_path_never_loads_textual() -> None:
    loaded = _modules_after(
        "import fleet.cli.main, fleet.render.status_view, fleet.service, fleet.recorder"
    )
    assert "textual" not in loaded


def test_db_imports_without_engine_layers() -> None:
    loaded = _modules_after("import db.engine, db.models")
    assert not loaded & {"fleet", "tui", "asyncssh", "textual"}
