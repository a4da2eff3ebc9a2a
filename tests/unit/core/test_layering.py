"""Layers point one way: phy802 and protocol never import torch, integration, or (phy802) protocol."""

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
    top = _imported_after(_modules("phy802"))
    assert "torch" not in top
    assert "integration" not in top
    assert "protocol" not in top


def test_protocol_does_not_import_torch_or_integration():
    top = _imported_after(_modules("protocol"))
    assert "torch" not in top and "integration" not in top
