"""The house rules a newcomer relies on, checked on the source: small modules, names that cannot be confused,
one path table, no hidden arguments, no test code in the product."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

from tests import source_tree

APP = Path(__file__).resolve().parents[2] / "models_registry"
MAX_MODULE_LINES = 300  # a module over this is asking to be split
# Basenames Django itself asks for in more than one place.
DJANGO_NAMES = {"__init__", "admin"}


def app_modules() -> list[Path]:
    """Every module of the app but its migrations."""
    return [path for path in sorted(APP.rglob("*.py")) if "migrations" not in path.parts]


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


def test_no_module_is_over_300_lines() -> None:
    assert long_modules(app_modules()) == []


def test_no_two_modules_have_names_that_can_be_confused() -> None:
    assert confusable_names([path.stem for path in app_modules()]) == []


def test_no_product_module_is_named_like_a_test() -> None:
    assert [path.name for path in app_modules() if path.stem.startswith("test")] == []


def test_paths_are_matched_from_the_path_table_alone() -> None:
    """A /models/ pattern or an API prefix spelled out anywhere but core/paths.py is a second path table."""
    spelled = re.compile(r"""["']\^?/models/\(|startswith\(\s*["']/v1/""")
    found = [f"{path.relative_to(APP.parent)}:{n}" for path in app_modules() if path.name != "paths.py"
             for n, line in enumerate(path.read_text().splitlines(), 1) if spelled.search(line)]
    assert found == []


def test_no_hidden_arguments_on_the_request_path() -> None:
    """The gate, the hand-off and the token check take what they need as arguments: no ContextVar carries it."""
    for relative in ("policy/gate.py", "policy/auth.py", "policy/dispatch.py", "broker/handoff.py",
                     "broker/enqueue.py", "api/inference_route.py"):
        tree = source_tree.parse(APP / relative)
        names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        assert "ContextVar" not in names, relative


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
