#!/bin/sh
# Seaquest's kernel, two builds alternating in one process
# (docs/journal/issue-16-minatar-kernels.md, "Seaquest, 2026-11-27"): A from the headers in folder
# DIR_A, B from DIR_B (copies of cext/envs/minatar/ with a change), with the shipped build's flags
# (setup_flags.py).
#     benchmarks/seaquest_ab/run.sh DIR_A DIR_B [N ROUNDS PER]
# An A/A run (the same folder twice) shows the noise: 0.998 [0.937, 1.057] on 2026-11-27.
set -e
here=$(dirname "$0")
# the headers minatar_common.h includes from the other cext/ folders (frame_pack.h, kernel_common.h)
shared="-I$here/../../cext/envs/face -I$here/../../cext/common"
out=${TMPDIR:-/tmp}/seaquest_ab.$$
mkdir -p "$out"
flags="-O3 -fno-math-errno -ffp-contract=off -mprefer-vector-width=256"
gcc $flags -DPFX=A -I"$1" $shared -c "$here/kernel.c" -o "$out/A.o"
gcc $flags -DPFX=B -I"$2" $shared -c "$here/kernel.c" -o "$out/B.o"
gcc -O2 "$here/ab.c" "$out/A.o" "$out/B.o" -o "$out/ab"
shift 2
"$out/ab" "$@"
status=$?
rm -rf "$out"
exit $status
