"""Builds the Cython kernels in cext/; everything else is declared in pyproject.toml.

Compiler flags live in setup_flags.py (shared with the C-loop benchmark).
"""

import glob
import os
import sys

from Cython.Build import cythonize
from setuptools import Extension, setup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from setup_flags import COMPILE_ARGS, EXTRA_COMPILE_ARGS  # noqa: E402

# Every .pyx under cext/ is one extension module operant.cext.<name>, whatever folder groups its
# source (cext/envs/minatar/minatar.pyx is operant.cext.minatar): the folders say which part
# of the system a kernel serves; the import names stay flat.
sources: dict[str, str] = {}
for path in sorted(glob.glob("cext/**/*.pyx", recursive=True)):
    name = os.path.splitext(os.path.basename(path))[0]
    if name in sources:
        sys.exit(
            f"setup.py: {sources[name]} and {path} would both be operant.cext.{name}: rename one"
        )
    sources[name] = path
folders = sorted(
    {
        os.path.dirname(path)
        for path in glob.glob("cext/**/*", recursive=True)
        if path.endswith((".h", ".pxd", ".pxi"))
    }
)

extensions = [
    Extension(
        f"operant.cext.{name}",
        [path],
        include_dirs=folders,
        # a header edit rebuilds the modules (setuptools compares only the .c with the .so
        # otherwise, and an edited minatar_seaquest.h left the old kernel in place)
        depends=sorted(glob.glob("cext/**/*.h", recursive=True)),
        extra_compile_args=[*COMPILE_ARGS, *EXTRA_COMPILE_ARGS.get(name, [])],
    )
    for name, path in sources.items()
]

setup(
    ext_modules=cythonize(
        extensions,
        include_path=folders,
        # OPERANT_BUILD_JOBS=N: translate the .pyx files in N processes (with
        # `setup.py build_ext -j N` compiling in parallel too); unset, one at a time.
        nthreads=int(os.environ.get("OPERANT_BUILD_JOBS", "0")),
        compiler_directives={"language_level": "3", "cdivision": True, "initializedcheck": False},
    )
)
