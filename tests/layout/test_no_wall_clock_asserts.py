"""Tests assert behaviour, not speed: no assert puts an upper bound on the wall clock.

A lower bound ("not before the grace ran out") cannot fail because the machine is
slow, so ``elapsed >= x`` is allowed; ``elapsed < x`` belongs in benchmarks/."""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parents[1]
CLOCKS = {"monotonic", "time", "perf_counter", "process_time"}


def _clock_call(n: ast.AST) -> bool:
    return (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in CLOCKS
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "time")


def _reads_clock(node: ast.AST) -> bool:
    """An elapsed time: a clock reading minus something. (``time.monotonic() < deadline`` in a
    wait loop is that loop's timeout, not a claim about speed.)"""
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub) and _clock_call(n.left)
               for n in ast.walk(node))


def _upper_bounds(tree: ast.AST):
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        for cmp in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
            operands = [cmp.left, *cmp.comparators]
            for i, op in enumerate(cmp.ops):
                low, high = operands[i], operands[i + 1]
                if isinstance(op, (ast.Lt, ast.LtE)) and _reads_clock(low):
                    yield node.lineno
                if isinstance(op, (ast.Gt, ast.GtE)) and _reads_clock(high):
                    yield node.lineno


def test_the_checker_finds_an_upper_bound_and_allows_a_lower_one():
    bad = ast.parse("assert time.monotonic() - t0 < 5\nassert 5 > time.time() - t0\n")
    good = ast.parse("assert time.monotonic() - t0 >= 1.8\nassert time.monotonic() < deadline, 'timed out'\n")
    assert list(_upper_bounds(bad)) == [1, 2] and list(_upper_bounds(good)) == []


def test_no_test_bounds_the_wall_clock_from_above():
    found = [f"{path.relative_to(TESTS)}:{line}" for path in sorted(TESTS.rglob("*.py"))
             if path.name != Path(__file__).name
             for line in _upper_bounds(ast.parse(path.read_text(), str(path)))]
    assert found == [], "upper bounds on elapsed time (move them to benchmarks/): " + ", ".join(found)
