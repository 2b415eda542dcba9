"""The repository's own rules: lint (ruff.toml) and layering (.importlinter)."""
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent


def _tool(name: str) -> str:
    path = BIN / name if (BIN / name).exists() else shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (requirements-test.txt installs it)")
    return str(path)


def test_ruff_finds_nothing():
    result = subprocess.run([_tool("ruff"), "check", "--output-format", "concise", "."],
                            cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_layers_are_kept():
    result = subprocess.run([_tool("lint-imports")], cwd=REPO_ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_library_module_lives_one_level_down():
    """Top level: entry points (python -m bert_jax.X); subpackages one level deep."""
    package = REPO_ROOT / "bert_jax"
    for path in package.rglob("*.py"):
        depth = len(path.relative_to(package).parts)
        assert depth <= 2, f"{path} is more than one subpackage deep"
        if depth == 1 and path.name != "__init__.py":
            assert 'if __name__ == "__main__":' in path.read_text(), (
                f"{path.name} sits at the top level but is not an entry point")
    stems = [p.stem for p in package.rglob("*.py") if p.name != "__init__.py"]
    assert len(stems) == len(set(stems)), sorted({s for s in stems if stems.count(s) > 1})
    assert not list(package.rglob("utils.py"))
