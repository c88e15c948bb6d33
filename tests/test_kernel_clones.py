"""The kernels' SIMD clones keep Gymnasium's float64 arithmetic, and the C yardstick of
benchmarks/bench_kernel_vs_c.py computes exactly what the CartPole kernel computes."""

import importlib.util
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import operant.cext.cartpole as cartpole
from operant.envs import make_env

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from setup_flags import COMPILE_ARGS  # noqa: E402


def test_shipped_flags_forbid_contraction():
    assert "-ffp-contract=off" in COMPILE_ARGS


def _clone_bodies(library: str, function: str) -> dict[str, str]:
    """Disassembly of each clone of `function` (GCC names them function.avx512f, ...)."""
    text = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", library], capture_output=True, text=True, check=True
    ).stdout
    bodies = {}
    for match in re.finditer(rf"<{function}\.(\w+)>:\n(.*?)(?:\n\n|\Z)", text, re.S):
        bodies[match.group(1)] = match.group(2)
    return bodies


@pytest.mark.skipif(
    shutil.which("objdump") is None
    or not sys.platform.startswith("linux")
    or platform.machine() != "x86_64",
    reason="needs objdump on x86-64 Linux (GCC's target_clones)",
)
def test_cartpole_loop_is_cloned_for_avx512_and_avx2_without_fused_multiply_adds():
    bodies = _clone_bodies(cartpole.__file__, "cartpole_advance_all")
    assert {"arch_x86_64_v4", "arch_x86_64_v3", "default"} <= set(bodies)
    for level in ("arch_x86_64_v4", "arch_x86_64_v3"):
        # float64 arithmetic on 256-bit vectors (setup_flags: -mprefer-vector-width=256)
        assert re.search(r"\bv(mul|add|sub|div)pd\s+[^\n]*%ymm", bodies[level]), level
    for name, body in bodies.items():
        assert not re.search(r"\bv?f(n?)m(add|sub)", body), f"a fused multiply-add in {name}"


def _bench_module():
    spec = importlib.util.spec_from_file_location(
        "bench_kernel_vs_c", ROOT / "benchmarks" / "bench_kernel_vs_c.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_c_reference_loop_equals_the_kernel_bit_for_bit():
    bench = _bench_module()
    n = 512
    env = make_env("CartPole-v1", n, impl="native", copy=False)
    env.reset(seed=3)
    env.actions[:] = np.random.default_rng(1).integers(0, 2, size=n)
    c_loop = bench.CLoop(bench.build_c_loop(), env.kernel, env.actions, env.max_episode_steps)
    for _ in range(300):
        env.kernel.step()
    c_loop.run(300)
    assert c_loop.recent_head[0] > n  # episodes ended and were redrawn on both sides
    assert bench.mismatches(env, c_loop) == []
