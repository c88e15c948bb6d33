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

# Every cext/*.pyx is one extension module operant.cext.<name>.
kernels = sorted(os.path.splitext(os.path.basename(p))[0] for p in glob.glob("cext/*.pyx"))

extensions = [
    Extension(
        f"operant.cext.{name}",
        [f"cext/{name}.pyx"],
        include_dirs=["cext"],
        # a header edit rebuilds the modules (setuptools compares only the .c with the .so
        # otherwise, and an edited minatar_seaquest.h left the old kernel in place)
        depends=sorted(glob.glob("cext/*.h")),
        extra_compile_args=[*COMPILE_ARGS, *EXTRA_COMPILE_ARGS.get(name, [])],
    )
    for name in kernels
]

setup(
    ext_modules=cythonize(
        extensions,
        include_path=["cext"],
        # OPERANT_BUILD_JOBS=N: translate the .pyx files in N processes (with
        # `setup.py build_ext -j N` compiling in parallel too); unset, one at a time.
        nthreads=int(os.environ.get("OPERANT_BUILD_JOBS", "0")),
        compiler_directives={"language_level": "3", "cdivision": True, "initializedcheck": False},
    )
)
