"""The layering rules, checked on the source: no import cycle between dlrun's modules (lazy imports
inside functions count too), infra/ never imports orchestrator/, jobs/ knows no dlrun internals,
and no module grows past 400 lines."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("orchestrator", "infra", "jobs", "configs")
MAX_LINES = 400


def modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports_of(path: Path, known: set[str]) -> set[str]:
    """dlrun modules this file imports anywhere (module top or inside functions)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                out.add(name)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports_of(p, set(mods)) - {m} for m, p in mods.items()}


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for d in sorted(g.get(n, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state and (c := visit(d)):
                return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(g):
        if n not in state and (c := visit(n)):
            return c
    return None


def test_no_import_cycle():
    assert find_cycle(graph()) is None, " -> ".join(find_cycle(graph()) or [])


def test_infra_never_imports_orchestrator():
    bad = {m: sorted(d for d in deps if d.startswith("orchestrator"))
           for m, deps in graph().items() if m.startswith("infra")}
    assert {m: d for m, d in bad.items() if d} == {}


def test_jobs_know_no_dlrun_internals():
    bad = {m: sorted(d for d in deps if d.startswith(("orchestrator", "infra")))
           for m, deps in graph().items() if m.startswith("jobs")}
    assert {m: d for m, d in bad.items() if d} == {}


def test_no_module_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in modules().values()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
