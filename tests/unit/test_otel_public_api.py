"""The app uses OpenTelemetry through its public API only (docs/STYLE: a private name of theirs is a defect).

Two checks over models_registry/, by syntax tree: no import of a private opentelemetry module or name (a path
segment or name beginning with one underscore: `opentelemetry.sdk.trace.sampling._get_from_env_or_default`,
`opentelemetry.exporter.http.transport._urllib3`), and, in every module that imports opentelemetry, no read of a
private attribute (`processor._queue`, `exporter._session`, `getattr(sampler, "_root")`): those modules hold
the SDK's objects, and ours there have no private attributes to read.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests import source_tree

APP = Path(__file__).resolve().parents[2] / "models_registry"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(tree: ast.Module) -> list[str]:
    """What tree names of opentelemetry's privates, each as `line: what`."""
    found: list[str] = []
    imports_otel = False
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("opentelemetry"):
            imports_otel = True
            names = node.module.split(".") + [alias.name for alias in node.names]
            found += [f"{node.lineno}: from {node.module} import {name}" for name in names if _private(name)][:1]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("opentelemetry"):
                    imports_otel = True
                    if any(_private(part) for part in alias.name.split(".")):
                        found.append(f"{node.lineno}: import {alias.name}")
    if imports_otel:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                found.append(f"{node.lineno}: .{node.attr}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                    "getattr", "setattr", "hasattr") and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                    and isinstance(node.args[1].value, str) and _private(node.args[1].value):
                found.append(f"{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    return found


def test_no_module_of_the_app_uses_a_private_name_of_opentelemetry() -> None:
    found = {str(path.relative_to(APP.parent)): uses for path in sorted(APP.rglob("*.py"))
             if (uses := private_uses(source_tree.parse(path)))}
    assert found == {}


def test_the_check_sees_a_private_import_an_attribute_and_a_getattr() -> None:
    tree = ast.parse("from opentelemetry.sdk.trace.sampling import _get_from_env_or_default\n"
                     "import opentelemetry.exporter.http.transport._urllib3\n"
                     "from opentelemetry.sdk.trace.export import BatchSpanProcessor\n"
                     "queue = BatchSpanProcessor(None)._batch_processor\n"
                     "root = getattr(sampler, '_root')\n"
                     "name = type(queue).__name__\n")
    assert private_uses(tree) == ["1: from opentelemetry.sdk.trace.sampling import _get_from_env_or_default",
                                  "2: import opentelemetry.exporter.http.transport._urllib3",
                                  "4: ._batch_processor", "5: getattr(..., '_root')"]
    assert private_uses(ast.parse("layer._pump.cancel()\n")) == []  # ours, in a module without opentelemetry
