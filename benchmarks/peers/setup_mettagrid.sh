#!/usr/bin/env bash
# The MettaGrid peer venv for benchmarks/bench_grid_vs_mettagrid.py (never Operant's deps).
#
#   bash benchmarks/peers/setup_mettagrid.sh [VENV]     # default /work/peers/mettagrid-venv
#
# mettagrid 0.26.22 ships a cp311 wheel. Its PufferLib env (MettaGridPufferEnv, what its own
# perf_benchmark.py steps) needs the "train" extra, pufferlib-core, which pins torch==2.9.0 and
# would pull a multi-GB CUDA build: torch 2.13.0 (CPU) goes in first and pufferlib-core without
# its pins; the simulator itself (what the side-by-side measures first) needs neither.
set -euo pipefail
VENV="${1:-/work/peers/mettagrid-venv}"
python3.11 -m venv "$VENV"
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q mettagrid==0.26.22
"$VENV/bin/pip" install -q --no-deps pufferlib-core==3.0.23
"$VENV/bin/pip" install -q psutil rich rich-argparse setuptools
cd /tmp && "$VENV/bin/python" -c "import mettagrid.simulator, mettagrid.envs.mettagrid_puffer_env; print('mettagrid peer venv ready')"
