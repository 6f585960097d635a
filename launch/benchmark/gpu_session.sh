#!/usr/bin/env bash
# One GPU session's figures for docs/gpu.md, sized for one 10-minute device call (typically about 6 minutes):
# test_cuda first, then the host, the bare env's ceiling at the run's actor count and at all cores, the learner stage
# at batch 64 with where an update's time goes, and a 14-actor Mario run at 16 samples per transition with the GPU's
# utilization over its training epochs and a small final evaluation. Each step has its own time limit (540 s in all;
# none runs past BUDGET) and tolerates the others' failures. The plan and what each figure decides: docs/gpu.md.
#
#   on the device, .whl carried (../shared/gpu/gpu_wheels.sh download):   bash launch/benchmark/gpu_session.sh
#   the CPU dry run (tests/integration/test_gpu_session.py):   DRY_RUN=1 PY=.venv/bin/python bash launch/benchmark/gpu_session.sh
#
# Back in $OUT (default ./gpu-session), rewritten after every step: session.tar.gz (every step's log and JSON, the
# run's small files, no checkpoint), steps.tsv (step, rc, seconds, limit, note) and summary.txt. Work files and the
# run folder stay in $WORK (default /tmp/gpu-session). Exit 0 when every step passed or was skipped, else 1.
set -uo pipefail
DRY=${DRY_RUN:-0}
[ "${1:-}" = --dry-run ] && DRY=1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-gpu-session}
WORK=${WORK:-/tmp/gpu-session}
PY=${PY:-python3}
BUDGET=${BUDGET:-560}          # seconds; a step's limit is cut to what is left of it, and a step with under 5 s left is skipped
BASE_PORT=${BASE_PORT:-5600}   # the run's ports: BASE_PORT - 2 .. BASE_PORT + actors - 1
RUN_SECONDS=${RUN_SECONDS:-60} # the run's training time (--duration)

mkdir -p "$OUT" "$WORK" || exit 2
OUT=$(cd "$OUT" && pwd) WORK=$(cd "$WORK" && pwd)
case "$OUT/" in "$WORK/"*) echo "error: OUT=$OUT lies in WORK=$WORK" >&2; exit 2 ;; esac
case "$WORK/" in "$OUT/"*) echo "error: WORK=$WORK lies in OUT=$OUT" >&2; exit 2 ;; esac
if [ -n "$(ls -A "$WORK")" ] && [ ! -f "$WORK/.gpu-session" ]; then
  echo "error: WORK=$WORK holds files this script did not make" >&2; exit 2
fi
rm -rf "$WORK" && mkdir -p "$WORK" && touch "$WORK/.gpu-session" || exit 2
rm -f "$OUT/session.tar.gz" "$OUT/session.tar.gz.part" "$OUT/steps.tsv" "$OUT/summary.txt"
cd "$ROOT" || exit 2

if [ "$DRY" = 1 ]; then  # the CPU, the fake env, tiny sizes; every flag and path of the real session is still used
  export CUDA_VISIBLE_DEVICES=                                # no GPU: test_cuda skips, every stage runs on the CPU
  export TORCHDYNAMO_DISABLE=${TORCHDYNAMO_DISABLE:-1}        # torch.compile a no-op: minutes less on 2 cores
  DEVICE=cpu ENV=fake ACTORS=2 CORES=2 WINDOW=1 BATCH=16 UPDATES=2 EPOCHS=2
  SELECT=2 FINAL=2 LATE=1 LOW=1 NOOP=1
  STRETCH=4  # a loaded 2-core machine is no 16-core GPU host: the dry run checks plumbing, not time
  RUN_SECONDS=0  # no --duration: the dry run's training ends at its 40 updates, whatever the machine's speed
  DRY_ARGS=(--learner.steps 40 --learner.min-replay 300 --learner.updates-per-epoch 5 --replay.capacity 4096
            --learner.broadcast-env-steps 50 --eval.every-env-steps 400 --eval.episodes 1)
else
  DEVICE=cuda ENV=mario ACTORS=${ACTORS:-14} CORES=$(nproc) WINDOW=8 BATCH=64 UPDATES=40 EPOCHS=4
  SELECT=10 FINAL=20 LATE=5 LOW=10 NOOP=10
  STRETCH=1
  DRY_ARGS=()
fi
BUDGET=$((BUDGET * STRETCH))
export PY WORK DRY

FAILED=0 RC=0 SCIPY_NOTE=""
printf 'step\trc\tseconds\tlimit_s\tnote\n' > "$WORK/steps.tsv"
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >> "$WORK/steps.tsv"; }
skip() { RC=skip; record "$1" skip 0 0 "$2"; echo "== $1 skipped: $2"; }

step() {  # step NAME LIMIT CMD...: CMD in the repository root, its output in $WORK/NAME.log, stopped after LIMIT seconds
  local name=$1 limit=$(($2 * STRETCH)) start=$SECONDS note=""
  shift 2
  local left=$((BUDGET - SECONDS))
  if ((left < limit)); then limit=$left note="limit cut to the budget's ${left}s"; fi
  if ((limit < 5)); then skip "$name" "budget spent"; return; fi
  echo "== $(date +%T) $name (at most ${limit}s)"
  timeout -k 10 "$limit" "$@" > "$WORK/$name.log" 2>&1
  RC=$?
  if ((RC == 124 || RC == 137)); then note="${note:+$note; }stopped at its limit"; fi
  if ((RC != 0)); then FAILED=1; fi
  record "$name" "$RC" $((SECONDS - start)) "$limit" "$note"
  tail -n 3 "$WORK/$name.log"
}

gpu_query() {  # utilization (%) and memory used (MiB) of the first GPU; the dry run's stand-in: 0, 0
  if [ "$DRY" = 1 ]; then echo "0, 0"; else nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits | head -n 1; fi
}

host_info() {  # the GPU, the CPU topology and machine.json (launch/machine.py)
  if [ "$DRY" = 1 ]; then echo "dry run: no GPU queried" > "$WORK/gpu.csv"
  else nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$WORK/gpu.csv" 2>&1; fi
  lscpu > "$WORK/lscpu.txt" 2>&1
  lscpu -e > "$WORK/lscpu-e.txt" 2>&1
  "$PY" -c "import json, launch.machine as m; print(json.dumps(m.describe_machine(), indent=1))" > "$WORK/machine.json"
  local rc=$?
  cat "$WORK/gpu.csv" "$WORK/machine.json"
  return $rc
}
export -f host_info

sample_gpu() {  # every second until killed: time, the epoch lines the run has logged so far, utilization, memory
  echo "unix_time,epoch_lines,utilization_pct,memory_mib"
  local n
  while :; do
    n=$(grep -c '^\[MAIN\] Epoch ' "$1" 2>/dev/null)
    echo "$(date +%s),${n:-0},$(gpu_query | tr -d ' ')"
    sleep 1
  done
}

gpu_figure() {  # utilization over the training rows only: the samples after the run's first epoch line, before its last
  awk -F, 'NR > 1 && $3 ~ /^[0-9]+$/ {
      k++; e[k] = $2 + 0; u[k] = $3 + 0; all += $3; if ($2 + 0 > last) last = $2 + 0; if ($4 + 0 > mem) mem = $4 + 0 }
    END {
      for (i = 1; i <= k; i++) if (e[i] >= 1 && e[i] < last) { s += u[i]; n++; if (u[i] > mx) mx = u[i] }
      if (n) printf "GPU utilization over the training epochs (epoch lines 1 to %d): mean %.1f%%, max %d%%, %d samples", last, s / n, mx, n
      else printf "GPU utilization: no sample between the first and the last epoch line (%d epoch lines)", last
      if (k) printf "; all %d samples of the run: mean %.1f%%; memory at most %d MiB\n", k, all / k, mem
      else printf "; no sample\n" }' "$WORK/gpu-util.csv"
}

summarize() {
  local mode="on $(uname -n)"
  [ "$DRY" = 1 ] && mode="dry run (CPU, fake env, tiny sizes)"
  echo "gpu_session.sh $mode, $(date -u +%FT%TZ), ${SECONDS}s of the ${BUDGET}s budget"
  [ -n "$SCIPY_NOTE" ] && echo "$SCIPY_NOTE"
  cat "$WORK/steps.tsv"
  echo "-- figures"
  tail -n 1 "$WORK/test-cuda.log" 2>/dev/null | sed 's/^/test_cuda: /'
  grep -h -m 1 'env_ceiling:' "$WORK/ceiling-actors.log" 2>/dev/null | sed "s/^/$ACTORS processes: /"
  grep -h -m 1 'env_ceiling:' "$WORK/ceiling-cores.log" 2>/dev/null | sed "s/^/$CORES processes: /"
  grep -h -E '^learner (run_|split)' "$WORK/learner.log" 2>/dev/null
  grep -h '^\[MAIN\] Epoch ' "$WORK/run.log" 2>/dev/null | tail -n 1
  grep -h -E '^\[MAIN\] (compiled|accounting|stopped after)|^\[FINAL\] (last|best) |^\[FINAL\] wrote' "$WORK/run.log" 2>/dev/null
  cat "$WORK/gpu-util.txt" 2>/dev/null
}

finish() {  # after every step: the run's small files, the GPU figure, summary.txt; then session.tar.gz and the tables in $OUT
  local run f
  run=$(ls -d "$WORK"/runs/*/ 2>/dev/null | tail -n 1)
  if [ -n "$run" ]; then
    mkdir -p "$WORK/run"
    for f in config.json machine.json metrics.jsonl eval_final.json; do
      if [ -f "$run/$f" ]; then cp "$run/$f" "$WORK/run/"; fi
    done
  fi
  if [ -s "$WORK/gpu-util.csv" ]; then gpu_figure > "$WORK/gpu-util.txt"; fi
  summarize > "$WORK/summary.txt"
  (cd "$WORK" && find . -maxdepth 2 -type f ! -path './runs/*' ! -name '*.pt' ! -name '.gpu-session' -size -8M |
    sed 's|^\./||' | sort | tar -czf "$OUT/session.tar.gz.part" -T -) &&
    mv -f "$OUT/session.tar.gz.part" "$OUT/session.tar.gz" || rm -f "$OUT/session.tar.gz.part"
  cp "$WORK/steps.tsv" "$WORK/summary.txt" "$OUT/"
}

# 1. packages: gpu_wheels.sh exits 2 when only the Mario stack failed; the steps without Mario still run
if [ "$DRY" = 1 ]; then
  skip wheels "dry run: the packages as installed"
elif [ -f .whl/gpu_wheels.sh ]; then
  step wheels 50 bash .whl/gpu_wheels.sh install
  if [ "$RC" = 0 ] || [ "$RC" = 2 ]; then export PYTHONPATH="${SITE:-/tmp/site}:$ROOT"; fi
else
  skip wheels "no .whl/gpu_wheels.sh: the packages as installed"
fi
# the run's final evaluation (shared/evaluation/protocol.py: intervals and the selection's t-test) needs SciPy
if "$PY" -c 'import scipy.stats' > /dev/null 2>&1; then
  record scipy 0 0 0 "the run plays its final evaluation"
else
  SCIPY_NOTE="scipy missing: final evaluation skipped"
  FINAL=0
  skip scipy "$SCIPY_NOTE"
fi
finish

# 2. the correctness gate: if it fails, no figure below counts
step test-cuda 130 "$PY" -m pytest -q -rs --durations=10 -p no:cacheprovider tests/integration/test_cuda.py
finish

step host 15 bash -c host_info
finish

# 3. the bare env's ceiling: at the run's actor count, and at every core
step ceiling-actors 40 "$PY" -m launch.benchmark --stages env_ceiling --env "$ENV" --actors "$ACTORS" --seconds "$WINDOW" \
    --rounds 1 --json "$WORK/ceiling-actors.json"
finish
step ceiling-cores 40 "$PY" -m launch.benchmark --stages env_ceiling --env "$ENV" --actors "$CORES" --seconds "$WINDOW" \
    --rounds 1 --json "$WORK/ceiling-cores.json"
finish

# 4. the learner alone at the runs' batch: the run's own update (prioritized, uniform), its split, the variants
step learner 90 "$PY" -m launch.benchmark --stages learner --env "$ENV" --learner-updates "$UPDATES" --learner-epochs "$EPOCHS" \
    --run.learner.micro-batch "$BATCH" --run.learner.accum-steps 1 --json "$WORK/learner.json"
finish

# 5. a run at 16 samples per transition (the learner sets the pace), the GPU sampled every second; checkpoints only
#    at the end, the run folder in $WORK, its small files copied into the tarball by finish
sample_gpu "$WORK/run.log" > "$WORK/gpu-util.csv" &
SAMPLER=$!
step run $((RUN_SECONDS + 115 * STRETCH)) "$PY" -m launch.local --actors "$ACTORS" --env.name "$ENV" --device "$DEVICE" \
    --total-env-steps 300000 --learner.samples-per-insert 16 --learner.lr 1e-4 \
    --learner.micro-batch "$BATCH" --learner.accum-steps 1 --learner.checkpoint-every 100000 --learner.checkpoint-seconds 0 --duration "$RUN_SECONDS" \
    --eval.keep-snapshots 2 --eval.keep-weights 2 --eval.select-episodes "$SELECT" --eval.final-episodes "$FINAL" \
    --eval.late-episodes "$LATE" --eval.low-epsilon-episodes "$LOW" --eval.noop-episodes "$NOOP" \
    --transport.base-port "$BASE_PORT" --run-dir "$WORK/runs" --label gpu-r16 --no-progress "${DRY_ARGS[@]}"
kill "$SAMPLER" 2>/dev/null
wait "$SAMPLER" 2>/dev/null
finish

echo "== $(date +%T) done in ${SECONDS}s: $OUT/session.tar.gz"
cat "$WORK/summary.txt"
exit "$FAILED"
