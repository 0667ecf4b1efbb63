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
# Ranks waiting in a collective yield the CPU instead of spinning (this
# machine's cores are shared by the ranks, and with other work).
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
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
print("\nsummary (medians per call; per rank columns: the rank with the most compute):"
      "\n  ratio = the call's median / one process's (np 1, calls alternating, same cores)")
print(f"{'T':>5} {'ranks':>5} {'call ms':>9} {'compute':>9} {'agree':>8} {'exchange':>9}"
      f" {'MiB held':>9} {'KiB out':>8} {'ratio':>6}")
for (np, T), r in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    base = runs.get((1, T), {}).get("single_median_ms", 0)
    p = max(r["per_rank"], key=lambda q: q["compute_ms"])
    held = max(q["bytes_loaded"] for q in r["per_rank"]) / 1048576
    sent = max(q["sent_kib"] for q in r["per_rank"])
    ratio = r["median_ms"] / base if base else float("nan")
    print(f"{T:>5} {np:>5} {r['median_ms']:>9.3f} {p['compute_ms']:>9.3f} {p['agree_ms']:>8.3f}"
          f" {p['exchange_ms']:>9.3f} {held:>9.1f} {sent:>8.1f} {ratio:>6.2f}")
PY
