"""Builds the Cython kernels in cext/; everything else is declared in pyproject.toml.

Flags are portable on purpose: no -march=native in a build that ships (wheels must run on
other CPUs). OPERANT_NATIVE_ARCH=1 opts in for local benchmarks only.
"""

import glob
import os

from Cython.Build import cythonize
from setuptools import Extension, setup

compile_args = ["-O3", "-fno-math-errno"]
if os.environ.get("OPERANT_NATIVE_ARCH") == "1":
    compile_args.append("-march=native")

# Every cext/*.pyx is one extension module operant.cext.<name>.
kernels = sorted(os.path.splitext(os.path.basename(p))[0] for p in glob.glob("cext/*.pyx"))

extensions = [
    Extension(
        f"operant.cext.{name}",
        [f"cext/{name}.pyx"],
        include_dirs=["cext"],
        extra_compile_args=compile_args,
    )
    for name in kernels
]

setup(
    ext_modules=cythonize(
        extensions,
        include_path=["cext"],
        compiler_directives={"language_level": "3", "cdivision": True, "initializedcheck": False},
    )
)
