"""The package's layers, read from its source (imports inside functions included, those under
``TYPE_CHECKING`` not): no import circle; ``core``, ``io``, ``text``, ``models`` and ``parallel``
never import a domain or a surface; the domains never import one another nor a surface."""

import ast
from pathlib import Path

import salience

ROOT = Path(salience.__file__).parent
LOWER = {"core", "io", "text", "models", "parallel", "exceptions", "extras"}
DOMAINS = {"search", "keywords", "summarize", "data", "explain", "compress"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules) -> set[str]:
    """The salience modules ``name`` imports: ``from package import module`` names the module,
    ``from module import name`` the module (its package's ``__init__`` only when named)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test)
                   for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target.startswith("salience") and target != name:
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _circles(graph: dict[str, set[str]]) -> list[str]:
    """Each module that reaches itself, with the path that does."""
    circles = []
    for start in graph:
        stack, visited = [(start, [start])], set()
        while stack:
            module, trail = stack.pop()
            for nxt in graph.get(module, ()):
                if nxt == start:
                    circles.append(" -> ".join(trail + [start]))
                elif nxt not in visited:
                    visited.add(nxt)
                    stack.append((nxt, trail + [nxt]))
    return circles


def test_no_import_circle():
    circles = _circles(_graph())
    assert not circles, circles[:5]


def _wrong_way(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, imported in graph.items():
        mine = _layer(module)
        for target in imported:
            theirs = _layer(target)
            if theirs == mine:
                continue
            if mine in LOWER and theirs not in LOWER:
                wrong.append(f"{module} (beneath the domains) imports {target}")
            if mine in DOMAINS and theirs not in LOWER:
                wrong.append(f"{module} (a domain) imports {target}")
    return wrong


def test_layers_import_only_downwards():
    wrong = _wrong_way(_graph())
    assert not wrong, wrong


def test_the_check_sees_a_circle_and_an_upward_import(tmp_path):
    modules = {"salience.text.a": tmp_path / "a.py", "salience.text.b": tmp_path / "b.py",
               "salience.search.c": tmp_path / "c.py"}
    (tmp_path / "a.py").write_text("def f():\n    from salience.text.b import g\n")
    (tmp_path / "b.py").write_text("from salience.text import a\nfrom salience.search.c import h\n")
    (tmp_path / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from salience.text.a import f\n")
    assert _imports("salience.text.a", modules["salience.text.a"], modules) == {"salience.text.b"}
    assert _imports("salience.text.b", modules["salience.text.b"], modules) == {"salience.text.a", "salience.search.c"}
    assert _imports("salience.search.c", modules["salience.search.c"], modules) == set()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _circles(graph) == ["salience.text.a -> salience.text.b -> salience.text.a",
                               "salience.text.b -> salience.text.a -> salience.text.b"]
    assert _wrong_way(graph) == ["salience.text.b (beneath the domains) imports salience.search.c"]
