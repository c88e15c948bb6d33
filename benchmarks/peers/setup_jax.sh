#!/usr/bin/env bash
# The JAX peer's venv, for benchmarks/peers/purejaxrl_minatar.py and jax_side_by_side.py
# (never an Operant dependency).
#
#   bash benchmarks/peers/setup_jax.sh [VENV]     # default /work/venvs/jax
#
# Python 3.12 (pyenv's, or python3.12 on PATH; set PYTHON to choose another). gymnax 1.0.1 is
# the newest gymnax and caps jax below 0.12, so jax is 0.11.2 (jax 0.12 would pull gymnax back
# to 0.0.9, whose step() returns the older 5-tuple). gymnax imports `six` (its MNIST loader,
# pulled in by `import gymnax`) without declaring it, hence the explicit install. Verified on
# 2026-11-29: jax/jaxlib 0.11.2, gymnax 1.0.1, flax 0.12.12, optax 0.2.8, numpy 2.5.5.
set -euo pipefail
VENV="${1:-/work/venvs/jax}"
PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
    for candidate in /root/.pyenv/versions/3.12*/bin/python3.12 "$(command -v python3.12 || true)"; do
        if [[ -x "$candidate" ]]; then PYTHON="$candidate"; break; fi
    done
fi
if [[ -z "$PYTHON" ]]; then
    echo "setup_jax.sh: no Python 3.12 found: set PYTHON=/path/to/python3.12" >&2
    exit 2
fi
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q "jax[cpu]==0.11.2" "jaxlib==0.11.2" gymnax==1.0.1 flax==0.12.12 \
    optax==0.2.8 numpy==2.5.5 six==1.17.0
cd /tmp && "$VENV/bin/python" -c "import gymnax, flax, optax, jax; print('jax peer venv ready:', jax.__version__, jax.devices())"
