#!/usr/bin/env bash
# Peer PPO baselines for Operant, measured on this machine.
# =========================================================
#
# What it measures
#   End-to-end PPO training on CartPole with two peer libraries, each with its
#   own trainer, on CPU, one JSON line per run (appended to the output file):
#     sb3        stable-baselines3 PPO("MlpPolicy", "CartPole-v1")
#                  config default: SB3's defaults (1 env, n_steps 2048, ...),
#                  config zoo: rl-baselines3-zoo's tuned CartPole-v1 params
#                  (8 envs, n_steps 32, batch 256, 20 epochs, lin 1e-3 lr, ...)
#     pufferlib  PufferLib 3.0's PuffeRL trainer on its Ocean CartPole
#                  (puffer_cartpole) with the shipped config/ocean/cartpole.ini:
#                  config shipped (Multiprocessing, LSTM), serial (Serial
#                  backend), serial-nolstm (Serial, rnn_name=None)
#   Fields: sps = env steps / wall time of the training loop (imports and
#   model construction excluded); solve_s = seconds from the start of training
#   until the mean return of the last 100 episodes first reaches 475 (null if
#   not within the budget); steps_to_solve; versions. See each script's
#   docstring for details. PufferLib's Ocean CartPole is capped at 200 steps
#   (CartPole-v0 length), so 475 is unreachable there: its lines carry
#   solve_s null and solve_equiv_s (mean episode length >= 190 = 95% of cap).
#   torch runs with 1 thread (--threads in the scripts to change).
#
# Isolation
#   The peers are NOT Operant dependencies. They live in their own venvs:
#     $PEERS_VENV         (default /work/peers-venv)   stable-baselines3
#     $PUFFER_VENV        (default $PEERS_VENV-puffer)  pufferlib
#   Two venvs because pufferlib 3.0.0 pins numpy<2 and gymnasium<=0.29.1, while
#   SB3 2.9.2 installs numpy 2 / gymnasium 1.x. Each is created and filled if
#   missing (torch==2.13.0 first: the CPU build; a bare `torch` would pull the
#   multi-GB CUDA build).
#
#   pufferlib 3.0.0 ships only as an sdist whose setup.py downloads raylib /
#   box2d archives from GitHub at build time and builds a CUDA extension when
#   `nvcc` is on PATH. To build it offline against the CPU torch this script:
#   fetches the sdist from PyPI's simple index (sha256-checked), creates empty
#   placeholder dirs for the web/box2d downloads (the linux raylib it links is
#   inside the sdist), keeps only the cartpole Ocean binding (the others are
#   not needed here; impulse_wars would need box2d), hides nvcc from PATH, and
#   runs `pip install --no-build-isolation`. Set SKIP_PUFFER=1 to skip it.
#
# Usage
#   benchmarks/peers/run_peers.sh [OUTPUT.jsonl]   (default benchmarks/results/peers.jsonl;
#   results/ is untracked scratch: records that docs cite are copied to benchmarks/records/)
#   env: SEEDS="1 2 3" (SEEDS="" installs only)  ONLY=sb3|pufferlib  BENCH_LOCK=/tmp/operant-bench.lock
#        SB3_DEFAULT_STEPS=200000 SB3_ZOO_STEPS=100000
#        PUFFER_LSTM_STEPS=2000000 PUFFER_MLP_STEPS=20000000
#        RUN_TIMEOUT=1800 (seconds per run, inside the lock)
#   Every measurement runs under `flock $BENCH_LOCK` so that benchmarks on this
#   2-core machine never overlap; installs do not take the lock. A run that
#   fails appends a line with "error" instead of numbers. stderr of each run
#   goes to $LOG_DIR (default /tmp/operant-peers-logs), which is also the
#   runs' working directory (importing pufferlib drops a "resources" symlink
#   into its cwd).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:-$ROOT/benchmarks/results/peers.jsonl}
PEERS_VENV=${PEERS_VENV:-/work/peers-venv}
PUFFER_VENV=${PUFFER_VENV:-${PEERS_VENV}-puffer}
SEEDS=${SEEDS-"1 2 3"}
ONLY=${ONLY:-}
SKIP_PUFFER=${SKIP_PUFFER:-0}
LOCK=${BENCH_LOCK:-/tmp/operant-bench.lock}
LOG_DIR=${LOG_DIR:-/tmp/operant-peers-logs}
SB3_DEFAULT_STEPS=${SB3_DEFAULT_STEPS:-200000}
SB3_ZOO_STEPS=${SB3_ZOO_STEPS:-100000}
PUFFER_LSTM_STEPS=${PUFFER_LSTM_STEPS:-2000000}
PUFFER_MLP_STEPS=${PUFFER_MLP_STEPS:-20000000}
RUN_TIMEOUT=${RUN_TIMEOUT:-1800}

TORCH_PIN=2.13.0
SB3_PIN=2.9.2
SB3_GYMNASIUM_PIN=1.4.0
SB3_NUMPY_PIN=2.4.6
PUFFER_PIN=3.0.0
HEAVYBALL_PIN=2.2.1   # pufferlib's Muon optimizer; unpinned by pufferlib
PUFFER_SHA256=7df3a3e3f5f894d78d2a1f5374097890aec01473183e748abefe4f3faa10eaa9

mkdir -p "$(dirname "$OUT")" "$LOG_DIR"

install_sb3() {
    if "$PEERS_VENV/bin/python" - <<EOF 2>/dev/null
import stable_baselines3, torch
assert stable_baselines3.__version__ == "$SB3_PIN", stable_baselines3.__version__
assert torch.__version__.startswith("$TORCH_PIN"), torch.__version__
EOF
    then return 0; fi
    echo "== installing stable-baselines3 $SB3_PIN into $PEERS_VENV" >&2
    [ -x "$PEERS_VENV/bin/python" ] || python3 -m venv "$PEERS_VENV"
    "$PEERS_VENV/bin/pip" install -q "torch==$TORCH_PIN"
    "$PEERS_VENV/bin/pip" install -q "torch==$TORCH_PIN" "stable-baselines3==$SB3_PIN" \
        "gymnasium==$SB3_GYMNASIUM_PIN" "numpy==$SB3_NUMPY_PIN"
}

install_puffer() {
    # (importing pufferlib drops a "resources" symlink into the cwd: check from $LOG_DIR)
    if (cd "$LOG_DIR" && "$PUFFER_VENV/bin/python" -c "import pufferlib.pufferl, pufferlib.ocean.cartpole.binding") 2>/dev/null; then
        return 0
    fi
    echo "== installing pufferlib $PUFFER_PIN into $PUFFER_VENV" >&2
    [ -x "$PUFFER_VENV/bin/python" ] || python3 -m venv "$PUFFER_VENV"
    local pip="$PUFFER_VENV/bin/pip"
    "$pip" install -q "torch==$TORCH_PIN"
    # build requirements of pufferlib's pyproject, installed by hand because
    # the build runs without isolation (isolation would fetch a CUDA torch)
    "$pip" install -q "torch==$TORCH_PIN" setuptools wheel Cython "numpy<2.0"
    local work
    work=$(mktemp -d)
    "$PUFFER_VENV/bin/python" - "$work" "$PUFFER_PIN" "$PUFFER_SHA256" <<'EOF'
import hashlib, re, sys, urllib.request
work, ver, sha = sys.argv[1:4]
name = f"pufferlib-{ver}.tar.gz"
index = urllib.request.urlopen("https://pypi.org/simple/pufferlib/", timeout=120).read().decode()
m = re.search(r'href="([^"#]*/' + re.escape(name) + r')#sha256=([0-9a-f]+)"', index)
if not m:
    sys.exit(f"{name} not found on PyPI's simple index")
data = urllib.request.urlopen(m.group(1), timeout=300).read()
got = hashlib.sha256(data).hexdigest()
if got != sha or m.group(2) != sha:
    sys.exit(f"sha256 mismatch for {name}: {got}")
open(f"{work}/{name}", "wb").write(data)
EOF
    tar -xzf "$work/pufferlib-$PUFFER_PIN.tar.gz" -C "$work"
    local src="$work/pufferlib-$PUFFER_PIN"
    mkdir -p "$src/raylib-5.5_webassembly" "$src/box2d-web" \
             "$src/box2d-linux-amd64/include" "$src/box2d-linux-amd64/src"
    find "$src/pufferlib/ocean" -name binding.c ! -path '*/cartpole/*' -delete
    local nocuda_path
    nocuda_path=$(printf '%s\n' "$PATH" | tr ':' '\n' | while read -r d; do
        [ -n "$d" ] && [ ! -e "$d/nvcc" ] && printf '%s\n' "$d"; done | paste -sd: -)
    (cd "$src" && PATH="$nocuda_path" MAX_JOBS=2 "$pip" install -q --no-build-isolation \
        . "torch==$TORCH_PIN" "heavyball==$HEAVYBALL_PIN")
    rm -rf "$work"
}

# run NAME PYTHON SCRIPT ARGS...: one measurement under the lock; appends one line
run() {
    local peer=$1 config=$2 seed=$3 py=$4; shift 4
    local log="$LOG_DIR/$peer-$config-seed$seed.err" line rc=0
    echo "== $peer $config seed $seed" >&2
    line=$(cd "$LOG_DIR" && flock "$LOCK" timeout "$RUN_TIMEOUT" "$py" "$@" 2>"$log" | tail -n 1) || rc=$?
    if [ "$rc" -eq 0 ] && [ "${line:0:1}" = "{" ]; then
        echo "$line" | tee -a "$OUT"
    else
        local why
        why=$(tail -n 3 "$log" | tr '\n"\\' '   ' | cut -c1-400)
        printf '{"peer": "%s", "config": "%s", "seed": %s, "sps": null, "solve_s": null, "steps_to_solve": null, "error": "exit %s: %s"}\n' \
            "$peer" "$config" "$seed" "$rc" "$why" | tee -a "$OUT"
    fi
}

if [ -z "$ONLY" ] || [ "$ONLY" = sb3 ]; then
    ( set -e; install_sb3 )
    py="$PEERS_VENV/bin/python"
    for seed in $SEEDS; do
        run sb3 default "$seed" "$py" "$HERE/sb3_cartpole.py" --config default --seed "$seed" --timesteps "$SB3_DEFAULT_STEPS"
    done
    for seed in $SEEDS; do
        run sb3 zoo "$seed" "$py" "$HERE/sb3_cartpole.py" --config zoo --seed "$seed" --timesteps "$SB3_ZOO_STEPS"
    done
fi

if [ "$SKIP_PUFFER" != 1 ] && { [ -z "$ONLY" ] || [ "$ONLY" = pufferlib ]; }; then
    set +e
    ( set -e; install_puffer )
    install_rc=$?
    set -e
    if [ "$install_rc" -eq 0 ]; then
        py="$PUFFER_VENV/bin/python"
        for config in shipped serial; do
            for seed in $SEEDS; do
                run pufferlib "$config" "$seed" "$py" -W ignore "$HERE/pufferlib_cartpole.py" \
                    --config "$config" --seed "$seed" --timesteps "$PUFFER_LSTM_STEPS"
            done
        done
        for seed in $SEEDS; do
            run pufferlib serial-nolstm "$seed" "$py" -W ignore "$HERE/pufferlib_cartpole.py" \
                --config serial-nolstm --seed "$seed" --timesteps "$PUFFER_MLP_STEPS"
        done
    else
        printf '{"peer": "pufferlib", "config": null, "seed": null, "sps": null, "solve_s": null, "steps_to_solve": null, "error": "pufferlib %s install failed"}\n' \
            "$PUFFER_PIN" | tee -a "$OUT"
    fi
fi
