"""The app's packages import only downward: staff -> api -> jobs -> policy -> worker -> broker -> observe -> capacity
-> inference -> catalog -> models -> tasks -> media -> core (docs/architecture.md). An upward import is a cut in the
wrong place. Only inference/ imports the model libraries, and no module imports relatively (so no import hides)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests import source_tree

APP = Path(__file__).resolve().parents[2] / "models_registry"
# Bottom first; a package may import its own modules and any package below it. models (Django's, a package
# since it was split) sits below catalog, whose snapshots read it, and above tasks, whose shapes validate it.
LAYERS = ("core", "media", "tasks", "models", "catalog", "inference", "capacity", "observe", "broker", "worker",
          "policy", "jobs", "api", "staff")
# The libraries that load or run models: heavy to import and device-bound, so they stay behind inference/.
MODEL_LIBRARIES = ("torch", "transformers", "onnxruntime", "onnx", "optimum", "accelerate")
RANK = {name: rank for rank, name in enumerate(LAYERS)}


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """(package of ours, line) for every import of models_registry.<package> in path, lazy ones included."""
    found: set[tuple[str, int]] = set()
    for node in ast.walk(source_tree.parse(path)):
        modules: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
            if node.module == "models_registry":
                modules = [f"models_registry.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        for module in modules:
            parts = module.split(".")
            if parts[0] == "models_registry" and len(parts) > 1 and parts[1] in RANK:
                found.add((parts[1], node.lineno))
    return found


def upward_imports(app: Path = APP) -> list[str]:
    """Every import in a layered package of app of a package at its level or above it."""
    wrong = []
    for package in LAYERS:
        for path in sorted((app / package).rglob("*.py")):
            for target, line in sorted(imported_packages(path)):
                if target != package and RANK[target] > RANK[package]:
                    wrong.append(f"{path.relative_to(app.parent)}:{line} ({package}) imports {target}")
    return wrong


def test_every_package_is_layered() -> None:
    """A new package must be given its place in LAYERS (and in the README's drawing)."""
    packages = {p.name for p in APP.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages - {"management", "migrations"} == set(LAYERS)


def test_no_package_imports_a_package_above_it() -> None:
    assert upward_imports() == []


def test_core_imports_no_django_http(tmp_path: Path) -> None:
    """core is what every package needs: no other package of ours (core's own modules only) and no Django HTTP layer."""
    for path in (APP / "core").rglob("*.py"):
        for node in ast.walk(source_tree.parse(path)):
            if isinstance(node, ast.ImportFrom) and node.module:
                ours = node.module.startswith("models_registry.") and not node.module.startswith("models_registry.core.")
                assert not ours and not node.module.startswith("django.http"), f"{path.name}: {node.module}"


def model_library_imports(path: Path) -> list[str]:
    """Every import of a model library in path, lazy ones included, as 'module:line'."""
    found = []
    for node in ast.walk(source_tree.parse(path)):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found += [f"{name}:{node.lineno}" for name in names if name.split(".")[0] in MODEL_LIBRARIES]
    return found


def test_only_inference_imports_model_libraries() -> None:
    """torch, transformers and ONNX Runtime are imported in inference/ alone (TYPE_CHECKING imports included)."""
    roots = [APP, APP.parent / "hosting"]
    wrong = [f"{path.relative_to(APP.parent)} imports {hit}"
             for root in roots for path in sorted(root.rglob("*.py"))
             if "inference" not in path.relative_to(APP.parent).parts[:2] and "migrations" not in path.parts
             for hit in model_library_imports(path)]
    assert wrong == []


def test_no_relative_imports() -> None:
    """A relative import would slip past the layer check; the app spells every import out."""
    wrong = [f"{path.relative_to(APP.parent)}:{node.lineno}"
             for path in sorted(APP.rglob("*.py"))
             for node in ast.walk(source_tree.parse(path))
             if isinstance(node, ast.ImportFrom) and node.level > 0]
    assert wrong == []


def test_the_protocol_module_depends_on_nothing_concrete() -> None:
    """inference/backend.py declares the contracts: it imports no other inference module, not even for types."""
    path = APP / "inference" / "backend.py"
    inference_imports = [line for package, line in imported_packages(path) if package == "inference"]
    assert inference_imports == []


def test_the_checks_see_model_libraries_and_relative_imports(tmp_path: Path) -> None:
    """The rules can fail: a lazy torch import and a relative import are both found."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    import torch.cuda\n    from . import sibling\n")
    assert model_library_imports(bad) == ["torch.cuda:2"]
    assert any(isinstance(n, ast.ImportFrom) and n.level == 1 for n in ast.walk(source_tree.parse(bad)))


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The check itself can fail: in an app whose catalog imports api (lazily, and once for types only), both
    imports are found, and catalog importing core is not."""
    catalog = tmp_path / "models_registry" / "catalog"
    catalog.mkdir(parents=True)
    (catalog / "bad.py").write_text("from typing import TYPE_CHECKING\n\nfrom models_registry.core import errors\n"
                                    "if TYPE_CHECKING:\n    from models_registry.api import views\n\n\n"
                                    "def f():\n    import models_registry.policy.gate\n")
    assert upward_imports(tmp_path / "models_registry") == [
        "models_registry/catalog/bad.py:5 (catalog) imports api",
        "models_registry/catalog/bad.py:9 (catalog) imports policy"]


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
