"""A small mutation check: which simple changes to one module do its tests fail to notice?

Applies one mutation at a time to the functions and methods of a module (comparison and boolean
operators flipped, ``not`` dropped, string, number and boolean constants changed, arithmetic swapped),
swaps the mutated code into the already imported functions, and runs the given tests in this same
process (so Airflow and the test set-up load once). A mutant the tests still pass "survived": either a
test is missing or the mutation does not change behaviour. Prints the survivors and a count.

Usage::

    .venv/bin/python scripts/mutation_check.py airflow_provider/decisions/rollout.py tests/tasks/test_rollout.py

The tests run without their ``conftest.py`` files unless ``--with-conftest`` is given, so pick tests
that need no fixture from them.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import io
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_SWAPS: dict[type[ast.AST], type[ast.AST]] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.And: ast.Or,
    ast.Or: ast.And,
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
}


def _docstrings(tree: ast.AST) -> set[int]:
    """``id`` of every docstring-like constant (never mutated): a string standing alone as a statement.

    Besides module, class and function docstrings this covers attribute docstrings (a string right after
    an assignment, as Sphinx reads them); such a statement does nothing, so mutating it proves nothing.
    """
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


class _Mutator(ast.NodeTransformer):
    """Applies mutation number ``target`` (counting every mutable spot inside functions) and records it."""

    def __init__(self, target: int, skip: set[int]) -> None:
        self.target = target
        self.skip = skip
        self.count = 0
        self.depth = 0
        self.applied: str | None = None

    def _spot(self, node: ast.AST, description: str) -> bool:
        if self.depth == 0:
            return False
        hit = self.count == self.target
        self.count += 1
        if hit:
            self.applied = f"line {getattr(node, 'lineno', '?')}: {description}"
        return hit

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        self.depth += 1
        node.body = [self.visit(stmt) for stmt in node.body]
        self.depth -= 1
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def _swap_op(self, op: ast.AST, node: ast.AST) -> ast.AST:
        swap = _SWAPS.get(type(op))
        if swap is not None and self._spot(node, f"{type(op).__name__} -> {swap.__name__}"):
            return swap()
        return op

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        node.ops = [self._swap_op(op, node) for op in node.ops]  # type: ignore[misc]
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        node.op = self._swap_op(node.op, node)  # type: ignore[assignment]
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        node.op = self._swap_op(node.op, node)  # type: ignore[assignment]
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not) and self._spot(node, "drop 'not'"):
            return node.operand
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if id(node) in self.skip:
            return node
        value = node.value
        if isinstance(value, bool):
            if self._spot(node, f"{value} -> {not value}"):
                return ast.copy_location(ast.Constant(not value), node)
        elif isinstance(value, (int, float)):
            if self._spot(node, f"{value!r} -> {value + 1!r}"):
                return ast.copy_location(ast.Constant(value + 1), node)
        elif isinstance(value, str) and self._spot(node, f"{value!r} -> 'XX{value}XX'"):
            return ast.copy_location(ast.Constant(f"XX{value}XX"), node)
        return node


def _functions(namespace: dict[str, Any], module_name: str) -> Iterator[tuple[str, types.FunctionType]]:
    """Every function defined by the module: top level, methods, properties (qualified name, function)."""
    for name, value in namespace.items():
        if isinstance(value, types.FunctionType) and value.__module__ == module_name:
            yield name, value
        elif isinstance(value, type) and value.__module__ == module_name:
            for attr, member in vars(value).items():
                for candidate in (member, getattr(member, "fget", None), getattr(member, "__func__", None)):
                    if isinstance(candidate, types.FunctionType):
                        yield f"{name}.{attr}", candidate


def _run_tests(tests: list[str], options: list[str]) -> bool:
    """Whether the tests pass (output swallowed)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = pytest.main([*tests, "-x", "-q", "-p", "no:cacheprovider", *options])
    return code == pytest.ExitCode.OK


def main(argv: list[str] | None = None) -> int:
    """Run the check; exit status 1 when a mutant survived."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module", type=Path, help="source file, e.g. airflow_provider/decisions/rollout.py")
    parser.add_argument("tests", nargs="+", help="test paths that should kill the mutants")
    parser.add_argument(
        "--with-conftest",
        action="store_true",
        help="load the tests' conftest files (slow: tests/conftest.py migrates a database on every run)",
    )
    args = parser.parse_args(argv)
    options = [] if args.with_conftest else ["--noconftest"]
    module_name = ".".join(args.module.with_suffix("").parts)
    module = importlib.import_module(module_name)
    source = args.module.read_text()
    originals = dict(_functions(vars(module), module_name))
    saved = {name: func.__code__ for name, func in originals.items()}
    if not _run_tests(args.tests, options):
        print("the tests fail on the unmutated code; fix them first", file=sys.stderr)
        return 2
    survivors: list[str] = []
    total = 0
    while True:
        tree = ast.parse(source)
        mutator = _Mutator(total, _docstrings(tree))
        mutated = ast.fix_missing_locations(mutator.visit(tree))
        if mutator.applied is None:
            break
        total += 1
        namespace: dict[str, Any] = {"__name__": module_name}
        exec(compile(mutated, str(args.module), "exec"), namespace)  # our own source, mutated
        try:
            for name, func in _functions(namespace, module_name):
                if name in originals:
                    originals[name].__code__ = func.__code__
            if _run_tests(args.tests, options):
                survivors.append(mutator.applied)
        finally:
            for name, code in saved.items():
                originals[name].__code__ = code
    for survivor in survivors:
        print(f"survived: {survivor}")
    print(f"{total} mutants, {total - len(survivors)} killed, {len(survivors)} survived")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
