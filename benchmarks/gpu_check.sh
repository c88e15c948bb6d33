#!/usr/bin/env bash
# The CUDA paths, end to end, on a machine with an NVIDIA GPU: what the CPU-only test suite
# cannot run. Each check prints "CHECK <name> rc=<exit>" and its output's last lines; the
# figures it prints go into docs/benchmarks.md ("On a GPU") and a dated docs/journal/ entry.
#
#   bash benchmarks/gpu_check.sh [DEVICE]       # DEVICE: cuda (default), or cpu to dry-run
#
# Expects operant installed (pip install .) and writes runs under $RUNS (default a temp dir).
set -u
DEV=${1:-cuda}
RUNS=${RUNS:-$(mktemp -d)}
mkdir -p "$RUNS"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}

check() {  # check NAME TIMEOUT CMD...: run CMD, keep its last lines and its exit status
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    timeout "$limit" "$@" >"$RUNS/$name.log" 2>&1
    local rc=$?
    echo "CHECK $name rc=$rc ($((SECONDS - start)) s): $*"
    tail -n "${TAIL:-6}" "$RUNS/$name.log" | cut -c1-400
    echo
}

python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
    torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'

# A CartPole run on the GPU (MLP), its evaluation, and its continuation on the CPU: a
# checkpoint written from CUDA tensors must load where there is no GPU.
check cartpole 100 operant-train --env CartPole-v1 --set train.device="$DEV" --runs-dir "$RUNS" \
    --run-id cp --quiet
check cartpole_eval 60 operant eval cp --runs-dir "$RUNS" --episodes 20 --json
check cartpole_resume_cpu 60 operant-train --resume cp --runs-dir "$RUNS" \
    --set train.device=cpu --set train.target_return=none --total-steps 600000 --quiet
check cartpole_resume_device 60 operant-train --resume cp --runs-dir "$RUNS" \
    --set train.device="$DEV" --set train.target_return=none --total-steps 700000 --quiet

# The batched torch envs on the device (env.impl = "torch"): discrete and continuous.
check torch_env_cartpole 60 operant-train --env CartPole-v1 --set env.impl=torch \
    --set train.device="$DEV" --runs-dir "$RUNS" --run-id tcp --total-steps 200000 --quiet
check torch_env_pendulum 60 operant-train --env Pendulum-v1 --set env.impl=torch \
    --set train.device="$DEV" --runs-dir "$RUNS" --run-id tpd --total-steps 100000 --quiet

# The CNN on MinAtar frames (CPU kernels, policy on the device), and its evaluation.
check breakout_cnn 120 operant-train --config configs/minatar/Breakout.toml \
    --set train.device="$DEV" --runs-dir "$RUNS" --run-id br --total-steps 500000 --quiet
check breakout_eval 60 operant eval br --runs-dir "$RUNS" --episodes 10 --json

# Ranks under torchrun: one rank on nccl (auto for a CUDA policy); two ranks on one GPU
# must be refused by the launcher with one line (nccl needs a GPU a rank).
check torchrun_nccl_1 60 operant-train --nproc-per-node 1 --env CartPole-v1 \
    --set train.device="$DEV" --runs-dir "$RUNS" --run-id tr1 --total-steps 100000 --quiet
check torchrun_nccl_2_refused 30 operant-train --nproc-per-node 2 --env CartPole-v1 \
    --set train.device="$DEV" --runs-dir "$RUNS" --run-id tr2 --total-steps 200000 --quiet

# Throughput of the trainer with the policy on the device against the same machine's CPU
# (one seed each: a figure beside its baseline, not a benchmark of record).
for dev in "$DEV" cpu; do
    TAIL=4 check "bench_mlp_$dev" 60 operant bench trainer --set train.device="$dev" --seeds 1
    TAIL=4 check "bench_cnn_$dev" 60 operant bench trainer --config configs/minatar/Breakout.toml \
        --set train.device="$dev" --seeds 1 --total-steps 200000
done
