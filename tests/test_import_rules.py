"""docs/architecture.md's import rules where import-linter cannot look: the compiled kernels.

`lint-imports` (CI, [tool.importlinter] in pyproject.toml) checks the Python packages; a .pyx
is not Python source to it, so here each kernel's Python-level imports are read from its
source: numpy and the standard library only, except the metrics file's writer, which also
imports the contract it writes (operant.shared's layout and atomic write) and psutil (the
writer's start time).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import\b(?!.*\bcimport\b)|import\s+([\w.]+))", re.M)
ALLOWED = {"numpy"} | set(sys.stdlib_module_names)
EXTRA = {"metrics": {"operant.shared", "psutil"}}


def python_imports(source: str) -> set[str]:
    """The modules a .pyx imports at the Python level (`cimport`s are C and not counted)."""
    found = set()
    for match in IMPORT.finditer(source):
        name = match.group(1) or match.group(2)
        if name and not source[match.start() : match.end()].lstrip().startswith("cimport"):
            found.add(name)
    return found


def test_every_kernel_imports_what_the_module_map_allows():
    kernels = sorted(ROOT.glob("cext/**/*.pyx"))
    assert len(kernels) >= 20 and any(path.stem == "metrics" for path in kernels)
    for path in kernels:
        allowed = ALLOWED | EXTRA.get(path.stem, set())
        for name in python_imports(path.read_text()):
            top = name.split(".")[0]
            assert top in allowed or any(name.startswith(extra) for extra in allowed), (
                f"{path.relative_to(ROOT)} imports {name}"
            )


def test_the_reader_sees_a_forbidden_import():
    """The check reads what it must: a kernel importing torch or the trainer is caught."""
    source = "from libc.stdint cimport int64_t\nimport numpy as np\nimport torch\n"
    assert python_imports(source) == {"numpy", "torch"}
    assert "operant.trainer.loop" in python_imports("from operant.trainer.loop import ppo\n")
    assert python_imports("cimport cython\nfrom atomics cimport load\n") == set()
