"""The install the README's commands make survives the next one: `scripts/setup.sh dev` after
`scripts/setup.sh` builds sdists (fast-downward-textworld, for TextWorld) under pip's build isolation,
whose sitecustomize.py empties sys.path and then reprocesses this environment's .pth files in every
Python the build starts, also one found on PATH (fast-downward's setup.py runs `python build.py`). A .pth
line that imports a module then fails without the standard library, and takes it with it: the build died
on `import glob`. The package's editable .pth is therefore a plain path (pyproject.toml, package-dir)."""

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# What pip's virtual build isolation writes (pip/_internal/build_env/virtual.py), reduced to the part that
# matters here: sys.path emptied, this environment's site-packages processed, sys.path put back.
PIP_SITECUSTOMIZE = """
import os, site, sys
original = sys.path[:]
sys.path = []
site.addsitedir({site!r}, known_paths=set())
added = set(os.path.normcase(p) for p in sys.path)
sys.path = [p for p in original if os.path.normcase(p) not in added]
"""


def editable_pths() -> list[Path]:
    return sorted(Path(sysconfig.get_paths()["purelib"]).glob("__editable__.textrl-*.pth"))


def test_the_editable_install_adds_a_path_and_runs_no_code():
    if not editable_pths():
        pytest.skip("textrl is not installed in editable mode here (scripts/setup.sh installs it so)")
    lines = [line for p in editable_pths() for line in p.read_text().splitlines() if line.strip()]
    assert lines == [str(ROOT)], lines


def test_another_python_under_pips_build_isolation_keeps_its_standard_library(tmp_path):
    """`python -S` has not processed this environment's .pth files at startup (nothing of them is imported
    yet), as another interpreter would not have: pip's sitecustomize must leave it a working stdlib."""
    (tmp_path / "sitecustomize.py").write_text(PIP_SITECUSTOMIZE.format(site=sysconfig.get_paths()["purelib"]))
    probe = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import sitecustomize; import glob, traceback; print('ok')"
    done = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
