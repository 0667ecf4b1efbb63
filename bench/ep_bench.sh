#!/bin/sh
# ep_bench.sh - expert parallelism's time split per rank (compute vs. the
# all-to-all exchanges) for a Qwen3-30B-A3B-shaped MoE layer (128 experts,
# hidden 2048, expert intermediate 768, top-8, wna16 int4 group 128) at 1, 2
# and 4 ranks on this machine, then a summary against one process.
#
#   bench/ep_bench.sh [BUILD_DIR] [MODEL_DIR]
#
# BUILD_DIR (default build) must have been configured with MPI (ep_bench and
# moeq there).  MODEL_DIR (default BUILD_DIR/ep_bench_model) is made with
# `moeq synth` when it has no config.json (about 300 MB; 2 minutes on 2
# cores).  TOKENS (default 1,16,128), REPS (10) and PLACEMENT (contiguous)
# come from the environment.  JSON per rank count goes to BUILD_DIR/ep_bench/.
set -eu
BUILD=${1:-build}
MODEL=${2:-$BUILD/ep_bench_model}
TOKENS=${TOKENS:-1,16,128}
REPS=${REPS:-10}
PLACEMENT=${PLACEMENT:-contiguous}
if [ ! -x "$BUILD/bench/ep_bench" ]; then
    echo "ep_bench.sh: no $BUILD/bench/ep_bench: configure $BUILD with MPI (-DMOEQ_MPI=ON)" >&2
    exit 2
fi
if [ ! -f "$MODEL/config.json" ]; then
    "$BUILD/moeq" synth wna16-int4-g128 "$MODEL" --experts 128 --top-k 8 --hidden 2048 \
        --intermediate 768 --layers 1
fi
# Open MPI asks for consent to run as root, and for --oversubscribe to start
# more ranks than cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=$BUILD/ep_bench
mkdir -p "$OUT"
CORES=$(nproc)
for np in 1 2 4; do
    extra=""
    [ "$np" -gt "$CORES" ] && extra="--oversubscribe"
    baseline=""
    [ "$np" -eq 1 ] && baseline="--baseline"
    echo "== mpirun -np $np"
    # shellcheck disable=SC2086 # optional words
    mpirun -np "$np" $extra "$BUILD/bench/ep_bench" "$MODEL" --tokens "$TOKENS" --reps "$REPS" \
        --placement "$PLACEMENT" $baseline --json "$OUT/np$np.json"
done
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
runs = {}
for np in (1, 2, 4):
    with open(os.path.join(out, f"np{np}.json")) as f:
        for line in f:
            r = json.loads(line)
            runs[(np, r["tokens"])] = r
print("\nsummary: ms per call (best); per rank the slowest rank's compute and comm ms;"
      " ratio = call / one process (np 1 --baseline, same cores)")
print(f"{'T':>5} {'ranks':>5} {'call ms':>9} {'compute':>9} {'comm':>8} {'comm %':>7}"
      f" {'MiB/rank':>9} {'KiB out/rank':>13} {'ratio':>6}")
for (np, T), r in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    base = runs.get((1, T), {}).get("single_ms", 0)
    comp = max(p["compute_ms"] for p in r["per_rank"])
    comm = max(p["comm_ms"] for p in r["per_rank"])
    held = max(p["bytes_loaded"] for p in r["per_rank"]) / 1048576
    sent = max(p["sent_kib"] for p in r["per_rank"])
    ratio = r["call_ms"] / base if base else float("nan")
    print(f"{T:>5} {np:>5} {r['call_ms']:>9.3f} {comp:>9.3f} {comm:>8.3f}"
          f" {100 * comm / (comp + comm):>6.0f}% {held:>9.1f} {sent:>13.1f} {ratio:>6.2f}")
PY
