"""Compiler flags of the shipped kernels, one place for setup.py and the C-loop benchmark.

Portable on purpose: no -march=native in a build that ships (wheels must run on other CPUs);
OPERANT_NATIVE_ARCH=1 opts in for local benchmarks only. -ffp-contract=off keeps the float64
arithmetic exactly Gymnasium's (no fused multiply-adds the reference does not do).
"""

import os

COMPILE_ARGS = ["-O3", "-fno-math-errno", "-ffp-contract=off"]
if os.environ.get("OPERANT_NATIVE_ARCH") == "1":
    COMPILE_ARGS.append("-march=native")
