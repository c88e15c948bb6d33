"""Compiler flags of the shipped kernels, one place for setup.py and the C-loop benchmark.

Portable on purpose: no -march=native in a build that ships (wheels must run on other CPUs);
OPERANT_NATIVE_ARCH=1 opts in for local benchmarks only. -ffp-contract=off keeps the float64
arithmetic exactly Gymnasium's (no fused multiply-adds the reference does not do).

EXTRA_COMPILE_ARGS names the modules that get more: `arithmetic` (the arithmetic bound's rate
loops, a yardstick of this CPU's FLOP rate rather than dynamics) may fuse multiply-adds.
"""

import os
import platform

COMPILE_ARGS = ["-O3", "-fno-math-errno", "-ffp-contract=off"]
if platform.machine().lower() in ("x86_64", "amd64"):
    # The AVX-512 clones (kernel_common.h's OP_VECTOR_CLONES) with 256-bit vectors: GCC's
    # generic tuning gives them 512-bit ones, and the CartPole loop was then about 13% slower
    # than with 256 (benchmarks/bench_kernel_vs_c.py, 2026-11-23), as -march=native's own tuning
    # for AVX-512 Xeons chooses. No effect on the clones without AVX-512.
    COMPILE_ARGS.append("-mprefer-vector-width=256")
if os.environ.get("OPERANT_NATIVE_ARCH") == "1":
    COMPILE_ARGS.append("-march=native")

# Per module, after COMPILE_ARGS (a later flag wins).
EXTRA_COMPILE_ARGS = {"arithmetic": ["-ffp-contract=fast"]}
if platform.machine().lower() in ("x86_64", "amd64"):
    EXTRA_COMPILE_ARGS["arithmetic"].append("-mprefer-vector-width=512")
