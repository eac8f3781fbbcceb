"""The house rules a newcomer relies on, checked on the source of the app and of hosting/ (admin.py and
management/ included): long modules pointed out, names that cannot be confused, one path table, no import cycles,
an app that never imports its project, no hidden arguments, no test code in the product."""

from __future__ import annotations

import ast
import re
import warnings
from collections import Counter
from pathlib import Path

from models_registry.core import paths
from tests import source_tree

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "models_registry"
PROJECT = ROOT / "hosting"
# A module this long is asking for a look, not a cut: one module with one job beats two cut only to get
# under a count (the hard 300 bent the design: modules split along no concept, lines joined to fit).
MAX_MODULE_LINES = 400
# Basenames Django asks for in more than one place (the project's and the app's), and the one command
# the project extends on purpose (hosting's runworker starts the embedded Redis, then runs the app's).
DJANGO_NAMES = {"__init__", "admin", "urls", "asgi", "runworker"}


def app_modules() -> list[Path]:
    """Every module of the app but its migrations (admin.py and management/ included)."""
    return [path for path in sorted(APP.rglob("*.py")) if "migrations" not in path.parts]


def house_modules() -> list[Path]:
    """The app's modules and the project's (hosting/)."""
    return app_modules() + sorted(PROJECT.rglob("*.py"))


def long_modules(paths: list[Path]) -> list[str]:
    """Modules over MAX_MODULE_LINES lines."""
    return [f"{path.parent.name}/{path.name}: {n}" for path in paths
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES]


def confusable_names(names: list[str]) -> list[str]:
    """Basenames used twice (in different packages), or one the plural of another (answer/answers)."""
    counts = Counter(name for name in names if name not in DJANGO_NAMES)
    twice = [f"{name} (x{count})" for name, count in counts.items() if count > 1]
    plurals = [f"{name}/{name}s" for name in counts if f"{name}s" in counts]
    return sorted(twice + plurals)


def test_a_module_over_the_line_budget_is_pointed_out() -> None:
    """A warning, not a failure: a long module is asking for a look, and a cut only to pass a count bends the design."""
    for long in long_modules(house_modules()):
        warnings.warn(f"{long} lines: does it hold more than one job?", stacklevel=1)


def test_no_two_modules_have_names_that_can_be_confused() -> None:
    assert confusable_names([path.stem for path in house_modules()]) == []


def test_no_product_module_is_named_like_a_test() -> None:
    assert [path.name for path in house_modules() if path.stem.startswith("test")] == []


# A string that is an API path (or a pattern of one): "/v1/embeddings", f"/models/{name}", "^(/models/...".
# Every path's first segment comes from the table itself, so a new route is covered as it is added.
FIRST_SEGMENTS = "|".join(sorted({re.escape(route.split("/")[0]) for route in paths.ROUTES.values()}))
API_PATH = re.compile(rf"^\^?\(?/(?:{FIRST_SEGMENTS})(?![\w.-])")


def docstring_nodes(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants in tree (prose about a path is not a path)."""
    bodies = [node.body for node in ast.walk(tree)
              if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)]
    return {id(body[0].value) for body in bodies
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)}


def literal_paths(files: list[Path]) -> list[str]:
    """Every string constant (an f-string's parts included) that is an API path, as 'file:line'."""
    found = []
    for path in files:
        tree = source_tree.parse(path)
        skipped = docstring_nodes(tree)
        found += [f"{path.relative_to(path.parents[1])}:{node.lineno}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped
                  and API_PATH.match(node.value)]
    return sorted(found, key=lambda where: (where.rpartition(":")[0], int(where.rpartition(":")[2])))


def test_api_paths_are_spelled_in_the_path_table_alone() -> None:
    """A path written anywhere but core/paths.py is a second path table: Django's URLconf, the OpenAPI
    document, the matchers, links and messages' examples all read core.paths."""
    assert literal_paths([path for path in house_modules() if path != APP / "core" / "paths.py"]) == []


def test_the_urlconf_and_the_document_serve_the_path_table() -> None:
    """Django's URLconf has a pattern for every route of the table, and the document a path for each API route."""
    from django.urls import get_resolver

    from models_registry.api.openapi.openapi import operations

    resolver = get_resolver("models_registry.urls")
    assert {pattern.name: str(pattern.pattern) for pattern in resolver.url_patterns} == paths.ROUTES
    documented = {operation.path for operation in operations(8)}
    assert documented == {paths.openapi_path(name) for name in paths.ROUTES} - {
        paths.openapi_path(page) for page in ("dashboard", "dashboard-data")}  # staff pages, not API


MODULE_ROOTS = ("models_registry", "hosting")


def module_name(path: Path, root: Path) -> str:
    """The dotted name of the module at path under root's parent (a package is its __init__)."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(files: list[Path], root: Path) -> dict[str, set[str]]:
    """module -> the modules of ours it imports, every import counted: TYPE_CHECKING and function-level ones too."""
    modules = {module_name(path, root): path for path in files}

    def ours(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: list[str] = []
        for node in ast.walk(source_tree.parse(path)):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets += [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
        graph[name] = {found for target in targets if (found := ours(target)) and found != name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or around a loop (strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_two_modules_import_each_other() -> None:
    """Two modules that import each other, even only for types or inside a function, are one concern or two badly
    cut: no cycle in the app or the project."""
    graph = import_graph([path for path in house_modules() if "migrations" not in path.parts], ROOT / "x")
    assert import_cycles(graph) == []


def project_imports(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """App module -> the project's modules it imports."""
    return {name: sorted(t for t in targets if t.split(".")[0] == "hosting") for name, targets in graph.items()
            if name.split(".")[0] == "models_registry" and any(t.split(".")[0] == "hosting" for t in targets)}


def test_the_app_never_imports_its_project() -> None:
    """models_registry is a reusable app: hosting/ uses it as any project would, never the other way round."""
    graph = import_graph([path for path in house_modules() if "migrations" not in path.parts], ROOT / "x")
    assert project_imports(graph) == {}


def test_no_hidden_arguments_on_the_request_path() -> None:
    """The gate, the hand-off and the token check take what they need as arguments: no ContextVar carries it."""
    for relative in ("policy/gate.py", "policy/auth.py", "policy/dispatch.py", "broker/handoff.py",
                     "broker/enqueue.py", "api/pipeline/inference_route.py"):
        tree = source_tree.parse(APP / relative)
        names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        assert "ContextVar" not in names, relative


def private_imports(graph_files: list[Path], root: Path) -> set[str]:
    """'module: name' for every private name of one of our modules imported, or read as module._name, by another."""
    modules = {module_name(path, root): path for path in graph_files}
    found = set()
    for name, path in modules.items():
        tree = source_tree.parse(path)
        bound: dict[str, str] = {}  # local name -> our module it stands for
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in modules:
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in modules:
                        bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                    elif alias.name.startswith("_"):
                        found.add(f"{name}: {node.module}.{alias.name}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.add(f"{name}: {bound[node.value.id]}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names() -> None:
    """A name with a leading underscore is its module's own: another module that needs it needs a public name."""
    files = [path for path in house_modules() if "migrations" not in path.parts]
    assert private_imports(files, ROOT / "x") == set()


WIRE_KEY_READ = re.compile(r"""(message|reply)(\[|\.get\()\s*["']""")


def wire_key_reads(paths: list[Path]) -> list[str]:
    """Lines that read a key of a wire message by hand ('message["model"]', 'reply.get("left")')."""
    return [f"{path.name}:{n}" for path in paths
            for n, line in enumerate(path.read_text().splitlines(), 1) if WIRE_KEY_READ.search(line)]


def test_only_the_wire_messages_module_knows_their_keys() -> None:
    """Web and worker read and write WorkRequest, WorkResult and TokenEvents; broker/messages.py alone holds keys."""
    sides = [path for package in ("broker", "worker", "policy") for path in sorted((APP / package).glob("*.py"))
             if path.name != "messages.py"]
    assert wire_key_reads(sides) == []


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """Each rule sees what it forbids."""
    big = tmp_path / "big.py"
    big.write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert long_modules([big]) == [f"{tmp_path.name}/big.py: {MAX_MODULE_LINES + 1}"]
    assert confusable_names(["answer", "answers", "leases", "leases", "admin", "admin"]) == [
        "answer/answers", "leases (x2)"]
    hand = tmp_path / "hand.py"
    hand.write_text('left = reply.get("left")\nmodel = str(message["model"])\n')
    assert wire_key_reads([hand]) == ["hand.py:1", "hand.py:2"]


def test_the_path_and_cycle_checks_can_fail(tmp_path: Path) -> None:
    """A path spelled outside the table is found (a docstring's prose is not), and so is a cycle through a
    TYPE_CHECKING import and a function-level one, and an import of the project from the app."""
    package = tmp_path / "models_registry"
    package.mkdir()
    spelled = package / "spelled.py"
    spelled.write_text('"""Serves POST /v1/embeddings."""\nURL = "/v1/embeddings"\nMODEL = f"/models/{name}"\n'
                       'PATTERN = r"^(/rerank|/tokenize)$"\nPROSE = "see GET /v1/models"\n')
    assert literal_paths([spelled]) == ["models_registry/spelled.py:2", "models_registry/spelled.py:3",
                                        "models_registry/spelled.py:4"]
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from models_registry.b import B\n")
    (package / "b.py").write_text("def f():\n    from models_registry import a\n")
    (package / "c.py").write_text("import hosting.process_tie\n")
    (tmp_path / "hosting").mkdir()
    (tmp_path / "hosting" / "process_tie.py").write_text("")
    graph = import_graph(sorted(tmp_path.rglob("*.py")), tmp_path / "x")
    assert import_cycles(graph) == [["models_registry.a", "models_registry.b"]]
    assert project_imports(graph) == {"models_registry.c": ["hosting.process_tie"]}
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    (package / "d.py").write_text("from models_registry.a import _hidden\nfrom models_registry import b\n"
                                  "b._helper()\nb.__name__\n")
    assert private_imports(sorted(package.glob("*.py")), tmp_path / "x") == {
        "models_registry.d: models_registry.a._hidden", "models_registry.d: models_registry.b._helper"}
