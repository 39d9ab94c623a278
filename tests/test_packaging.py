"""What users install: the wheel and sdist built from a clean export of the tree.

A wheel built in a working copy can pick files up from an old `build/` folder, so
the tree's tracked and unignored files are copied to a fresh folder and built there.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tree_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to list the tree's files")
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    return [name for name in listed if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    files = _tree_files()
    export = tmp_path_factory.mktemp("export")
    for name in files:
        target = export / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    dist = tmp_path_factory.mktemp("dist")
    wheel = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(export)],
                           capture_output=True, text=True)
    if wheel.returncode != 0:
        pytest.fail(f"pip wheel failed:\n{wheel.stdout}\n{wheel.stderr}")
    sdist = subprocess.run([sys.executable, "-m", "build", "--sdist", "-o", str(dist), str(export)],
                           capture_output=True, text=True)
    if sdist.returncode != 0:
        pytest.fail(f"python -m build --sdist failed:\n{sdist.stdout}\n{sdist.stderr}")
    return {"wheel": next(dist.glob("*.whl")), "sdist": next(dist.glob("*.tar.gz"))}


def _package_data_files() -> list[str]:
    """Every non-Python file under src/servesim, as a path inside the package."""
    return sorted(name[len("src/"):] for name in _tree_files()
                  if name.startswith("src/servesim/") and not name.endswith(".py"))


def test_package_has_data_files():
    names = _package_data_files()
    # The three kinds the package reads at run time, so the check below cannot pass vacuously.
    assert "servesim/data/default.yaml" in names
    assert "servesim/timing/data/roofline_fit.json" in names
    assert any(n.startswith("servesim/models/data/") and n.endswith(".json") for n in names)


def test_wheel_is_the_package_version(built):
    import servesim

    assert built["wheel"].name.startswith(f"servesim-{servesim.__version__}-")


def test_wheel_holds_every_data_file(built):
    inside = set(zipfile.ZipFile(built["wheel"]).namelist())
    missing = [name for name in _package_data_files() if name not in inside]
    assert missing == []
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in inside)


def test_sdist_holds_every_data_file(built):
    with tarfile.open(built["sdist"]) as archive:
        inside = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    missing = [f"src/{name}" for name in _package_data_files() if f"src/{name}" not in inside]
    assert missing == []
    assert {"LICENSE", "README.md", "pyproject.toml"} <= inside
