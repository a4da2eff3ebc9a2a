"""Layers point one way: phy802 and protocol never import torch, integration, or (phy802) protocol.

Only the command-line face (phy802.cli.<command>) imports upward, and only when its command runs."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _modules(pkg: str) -> list[str]:
    out = []
    for p in sorted((ROOT / pkg).rglob("*.py")):
        rel = p.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append(".".join(parts))
    return out


def _imported_after(mods: list[str]) -> set[str]:
    code = textwrap.dedent(f"""
        import importlib, sys
        for m in {mods!r}:
            importlib.import_module(m)
        print(" ".join(sorted({{k.split(".")[0] for k in sys.modules}})))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    return set(res.stdout.split())


def test_phy802_imports_neither_torch_nor_upper_layers():
    # phy802.cli is the command-line face: its subcommand modules may import upward (they are
    # loaded lazily, one per command run); the package itself may not.
    mods = [m for m in _modules("phy802") if not m.startswith("phy802.cli.") and not m.endswith("__main__")]
    assert "phy802.cli" in mods
    top = _imported_after(mods)
    assert "torch" not in top
    assert "integration" not in top
    assert "protocol" not in top


def test_protocol_does_not_import_torch_or_integration():
    top = _imported_after(_modules("protocol"))
    assert "torch" not in top and "integration" not in top


def test_cli_face_imports_upward_only_in_command_modules():
    import ast

    for path in sorted((ROOT / "phy802").rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[:2] == ("phy802", "cli") and rel.name not in ("__init__.py", "__main__.py"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for n in names:
                top = n.split(".")[0]
                assert top not in ("protocol", "integration", "torch"), f"{rel} imports {n}"
            if rel.name == "__main__.py":
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("phy802.cli"):
                assert rel.parts[:2] == ("phy802", "cli"), f"library module {rel} imports the CLI face"


def _phy802_imports(path: Path) -> set[str]:
    """Every phy802 module a file imports, at any depth of the file (lazy imports included)."""
    import ast

    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m.startswith("phy802")}


def test_runtime_package_forms_no_circle_and_defines_each_name_once():
    # The plumbing was private modules in a circle (_io imported _output lazily while _output
    # imported _io halfway down; both defined SET_MARKER, check_output_dir and output_set).  Now it
    # is phy802/runtime/, one job per module: the bottom layer (nothing else of phy802 imported),
    # no circle among its modules, each name defined once and imported from its own module.
    import ast
    import importlib

    pkg = ROOT / "phy802" / "runtime"
    mods = sorted(p.stem for p in pkg.glob("*.py") if p.stem != "__init__")
    graph: dict[str, set[str]] = {}
    defined: dict[str, list[str]] = {}
    for m in mods:
        imported = _phy802_imports(pkg / f"{m}.py")
        outside = {i for i in imported if not i.startswith("phy802.runtime.")}
        assert outside == set(), f"phy802.runtime.{m} imports {sorted(outside)}: the plumbing is the bottom layer"
        graph[m] = {i.split(".")[2] for i in imported} - {m}
        tree = ast.parse((pkg / f"{m}.py").read_text())
        for node in tree.body:
            names = ([node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else
                     [t.id for t in node.targets if isinstance(t, ast.Name)] if isinstance(node, ast.Assign) else
                     [node.target.id] if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) else [])
            for n in names:
                if n != "__all__":
                    defined.setdefault(n, []).append(m)
        for name in importlib.import_module(f"phy802.runtime.{m}").__all__:
            assert name in [n for n, ms in defined.items() if m in ms], f"{name} is not defined in phy802.runtime.{m}"
    assert {n: ms for n, ms in defined.items() if len(ms) > 1} == {}
    done: set[str] = set()

    def visit(m: str, path: tuple[str, ...]) -> None:
        assert m not in path, f"import circle: {' -> '.join(path + (m,))}"
        if m not in done:
            for d in sorted(graph[m]):
                visit(d, path + (m,))
            done.add(m)

    for m in mods:
        visit(m, ())
    old = [p.name for p in (ROOT / "phy802").glob("*.py") if p.stem in ("_io", "_output", "_tempfiles", "_moved")]
    assert old == []  # one way to import each name: no forwarding modules left behind


def test_argparse_only_in_the_command_line_face():
    # phy802/fec/vectors.py carried a second command line of its own (now `phy802 vectors`)
    import ast

    users = []
    for p in sorted((ROOT / "phy802").rglob("*.py")):
        if p.relative_to(ROOT).parts[:2] == ("phy802", "cli"):
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) else [])
            if "argparse" in names:
                users.append(str(p.relative_to(ROOT)))
    assert users == []
