"""A source file's syntax tree for the house tests, despite CPython 3.11's shared AST recursion counter."""

from __future__ import annotations

import ast
from pathlib import Path

TRIES = 5


def parse(path: Path) -> ast.Module:
    """ast.parse of path's text; again when another thread's parse upset it (cpython#106905, fixed after 3.11.7).

    On 3.11 the depth counter of the AST constructor is the interpreter's, not the thread's:
    a parse running in another thread of the test process at the same moment makes this one
    raise "AST constructor recursion depth mismatch", though the source is fine.
    """
    text = path.read_text()
    for attempt in range(TRIES):
        try:
            return ast.parse(text, str(path))
        except SystemError as error:
            if "recursion depth mismatch" not in str(error) or attempt == TRIES - 1:
                raise
    raise AssertionError("unreachable")
