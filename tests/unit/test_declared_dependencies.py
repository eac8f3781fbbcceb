"""pyproject.toml declares every third-party distribution the app imports, and requirements.txt pins each.

`pip install <checkout>[torch]` installs what pyproject.toml declares and nothing else: an import it does not
cover is a ModuleNotFoundError in the installing project (llguidance was one, at `migrate`). Every import of
models_registry/, lazy ones included, is mapped to the distribution that ships it (importlib.metadata, no
import of the module itself); inference/ may use the `torch` extra (workers install it), the rest only what a
plain install brings (the web tier and `migrate` run without it).
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from functools import cache
from pathlib import Path

from packaging.requirements import Requirement

from tests import source_tree

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "models_registry"
EXTRA_USERS = {"torch": "inference"}  # extra -> the one package of ours that may import what it brings


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules(path: Path) -> set[str]:
    """Every absolute module path path imports, lazy ones included; `from a import b` gives a.b as well as a."""
    found: set[str] = set()
    for node in ast.walk(source_tree.parse(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)  # a namespace's submodule
    return {module for module in found
            if module.split(".")[0] not in sys.stdlib_module_names and module.split(".")[0] != "models_registry"}


@cache
def top_level_owners() -> dict[str, list[str]]:
    """importlib.metadata.packages_distributions(), read once (it reads every installed RECORD)."""
    return importlib.metadata.packages_distributions()


@cache
def owners_by_file(top: str) -> dict[str, set[str]]:
    """For the distributions sharing namespace top: file path without suffix ("opentelemetry/sdk/trace/__init__")
    -> the distributions shipping it."""
    owners: dict[str, set[str]] = {}
    for name in top_level_owners().get(top, ()):
        for file in importlib.metadata.distribution(name).files or ():
            if file.suffix in (".py", ".pyi", ".so", ".pyd"):
                owners.setdefault(str(file).split(".")[0], set()).add(normalized(name))
    return owners


def distributions_of(module: str) -> set[str]:
    """The distributions that ship module (for a namespace package such as opentelemetry, its portion's owner)."""
    top = module.split(".")[0]
    candidates = {normalized(name) for name in top_level_owners().get(top, ())}
    if len(candidates) <= 1:
        return candidates
    path = module.replace(".", "/")
    for stem in (f"{path}/__init__", path):
        if stem in owners_by_file(top):
            return owners_by_file(top)[stem]
    return set()  # `from ns import name` where name is no module: its own module path is checked


def declared() -> tuple[set[str], dict[str, set[str]]]:
    """(the distributions pyproject.toml's dependencies name, extra -> the ones it adds)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {normalized(Requirement(line).name) for line in project["dependencies"]}
    extras = {extra: {normalized(Requirement(line).name) for line in lines}
              for extra, lines in project.get("optional-dependencies", {}).items()}
    return core, extras


def undeclared_imports() -> dict[str, list[str]]:
    """Distribution -> the app's files importing it where their package may not rely on it."""
    core, extras = declared()
    missing: dict[str, set[str]] = {}
    for path in sorted(APP.rglob("*.py")):
        package = path.relative_to(APP).parts[0]
        allowed = core | {dist for extra, dists in extras.items() if EXTRA_USERS.get(extra) == package
                          for dist in dists}
        for module in imported_modules(path):
            for dist in distributions_of(module) - allowed:
                missing.setdefault(dist, set()).add(str(path.relative_to(ROOT)))
    return {dist: sorted(paths) for dist, paths in sorted(missing.items())}


def pinned() -> set[str]:
    """The distributions requirements.txt pins."""
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return {normalized(Requirement(line).name) for line in lines if line.strip() and not line.startswith("#")}


def test_every_third_party_import_of_the_app_is_declared() -> None:
    assert undeclared_imports() == {}


def test_every_declared_distribution_is_pinned_in_requirements() -> None:
    core, extras = declared()
    assert sorted(core.union(*extras.values()) - pinned()) == []


def test_the_scan_sees_a_namespace_portion_and_a_missing_distribution() -> None:
    # Guards the check itself: a namespace package maps to the portion imported, and the app's own
    # grammar engine import is found (it was the undeclared one).
    assert distributions_of("opentelemetry.sdk.trace") == {"opentelemetry-sdk"}
    assert distributions_of("llguidance") == {"llguidance"}
    assert "llguidance" in imported_modules(APP / "tasks" / "json_grammar.py")
