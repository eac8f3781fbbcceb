"""The app's packages import only downward: api -> jobs -> policy -> worker -> broker -> observe -> inference
-> registry -> models -> tasks -> media -> core (README, Architecture). An upward import is a cut in the wrong place."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "models_registry"
# Bottom first; a package may import its own modules and any package below it. models (Django's, a package
# since it was split) sits below registry, whose snapshots read it, and above tasks, whose shapes validate it.
LAYERS = ("core", "media", "tasks", "models", "registry", "inference", "observe", "broker", "worker", "policy", "jobs",
          "api")
RANK = {name: rank for rank, name in enumerate(LAYERS)}


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """(package of ours, line) for every import of models_registry.<package> in path, lazy ones included."""
    found: set[tuple[str, int]] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
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


def upward_imports() -> list[str]:
    """Every import in a layered package of a package at its level or above it."""
    wrong = []
    for package in LAYERS:
        for path in sorted((APP / package).rglob("*.py")):
            for target, line in sorted(imported_packages(path)):
                if target != package and RANK[target] > RANK[package]:
                    wrong.append(f"{path.relative_to(APP.parent)}:{line} ({package}) imports {target}")
    return wrong


def test_every_package_is_layered() -> None:
    """A new package must be given its place in LAYERS (and in the README's drawing)."""
    packages = {p.name for p in APP.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages - {"management", "migrations"} == set(LAYERS)


def test_no_package_imports_a_package_above_it() -> None:
    assert upward_imports() == []


def test_core_imports_no_django_http(tmp_path: Path) -> None:
    """core is what every package needs: no package of ours and no Django HTTP layer."""
    for path in (APP / "core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith(("django.http", "models_registry.")), f"{path.name}: {node.module}"


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The check itself can fail: an import of api from registry is found."""
    bad = tmp_path / "bad.py"
    bad.write_text("from models_registry.api import views\n")
    assert ("api", 1) in imported_packages(bad)
    assert RANK["api"] > RANK["registry"]


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
