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
