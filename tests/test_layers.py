"""The layers import one way (docs/design.md, Layers): envs <- agents <- rewards <- algos <- scripts,
benchmarks. A module imports its own layer or lower ones, never a higher one, also inside a function;
imports form no cycle; the config imports without torch; a name is imported from the module that defines it."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {"envs": 0, "agents": 1, "rewards": 2, "algos": 3, "scripts": 4, "benchmarks": 4}


def modules() -> dict[str, Path]:
    out = {}
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(path: Path, module: str) -> list[tuple[str, bool, int]]:
    """(imported project module, at module level, line) for every import in the file."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    for node in tree.body:  # `if TYPE_CHECKING:` blocks hold no runtime import
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            top |= {id(n) for n in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the package
                base = module.split(".")[: -node.level] if path.name != "__init__.py" else module.split(".")
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names = [prefix] + [f"{prefix}.{a.name}" for a in node.names]
        else:
            continue
        typing_only = any(isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test) and node in ast.walk(n)
                          for n in tree.body)  # fmt: skip
        for name in names:
            if name.split(".")[0] in LAYERS and not typing_only:
                found.append((name, id(node) in top, node.lineno))
    return found


def graph() -> dict[str, list[tuple[str, bool, int]]]:
    known = modules()
    out = {}
    for module, path in known.items():
        edges = []
        for name, top, line in imports(path, module):
            while name and name not in known:  # `from pkg.mod import f` names f; the module is pkg.mod
                name = name.rpartition(".")[0]
            if name and name != module:
                edges.append((name, top, line))
        out[module] = edges
    return out


def test_no_module_imports_a_higher_layer() -> None:
    upward = sorted({f"{m} (line {line}) imports {target}"
                     for m, edges in graph().items() for target, _, line in edges
                     if LAYERS[target.split(".")[0]] > LAYERS[m.split(".")[0]]})  # fmt: skip
    assert not upward, "\n".join(upward)


def test_imports_form_no_cycle() -> None:
    """Module-level and lazy imports alike: a lazy import that closes a cycle hides a tangle, not fixes it."""
    edges = {m: sorted({t for t, _, _ in e}) for m, e in graph().items()}
    state: dict[str, int] = {}  # 1: on the path, 2: done
    cycles = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in edges.get(m, []):
            if state.get(t) == 1:
                cycles.append(" -> ".join(path[path.index(t) :] + [t]))
            elif t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in edges:
        if m not in state:
            visit(m, [m])
    assert not cycles, "\n".join(cycles)


def test_the_checker_sees_an_upward_import_and_a_cycle(tmp_path) -> None:
    """The walker itself: a lazy upward import and a relative one are found (the tests above can fail)."""
    f = tmp_path / "mod.py"
    f.write_text("import os\nfrom algos import config\n\ndef g():\n    from . import parser\n")
    found = imports(f, "agents.mod")
    assert ("algos.config", True, 2) in found and ("agents.parser", False, 5) in found


def test_the_config_imports_without_torch() -> None:
    code = "import sys, algos.config; print(sorted(m for m in ('torch', 'transformers', 'vllm') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("module", ["agents.generation", "algos.advantages", "algos.data", "rewards.layer"])
def test_the_config_sections_import_without_torch(module) -> None:
    code = f"import sys, {module}; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


def reexports(files: dict[str, Path]) -> list[str]:
    """`from pkg.mod import name` where pkg.mod did not define `name` but imported it: a second home
    for the name. A package's `__all__` is its public surface and may gather names (envs.TextEnv)."""
    known = modules()

    @functools.cache  # each module parsed once, not once per name imported from it
    def borrowed(module: str) -> frozenset[str]:
        tree = ast.parse(known[module].read_text())
        public = {name for n in tree.body if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)
                  for name in ast.literal_eval(n.value)}  # fmt: skip
        names = {a.asname or a.name for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
        return frozenset(names - public)

    found = []
    for where, path in files.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module in known:
                found += [f"{where}:{node.lineno} imports {a.name} from {node.module}, which imports it from elsewhere"
                          for a in node.names if a.name in borrowed(node.module)
                          and f"{node.module}.{a.name}" not in known]  # fmt: skip
    return found


def test_every_name_is_imported_from_its_home() -> None:
    files = {str(p.relative_to(ROOT)): p for p in [*modules().values(), *sorted((ROOT / "tests").glob("*.py"))]}
    found = reexports(files)
    assert not found, "\n".join(found)


def test_the_checker_sees_a_borrowed_name(tmp_path) -> None:
    f = tmp_path / "user.py"
    f.write_text("from algos.learner import Sample\nfrom algos.logprobs import Sample\n")
    assert reexports({"user.py": f}) == ["user.py:1 imports Sample from algos.learner, which imports it from elsewhere"]
