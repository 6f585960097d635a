#!/usr/bin/env bash
# One GPU session's measurements for docs/gpu.md, sized for one device call (under 10 minutes on an H100/H200 with
# 16 cores): the host's topology, the bare env's ceiling at 14 and 16 processes, the learner stage at batch 64
# (prioritized and uniform), a 14-actor Mario run on 1-1 holding 16 samples per transition with the GPU's
# utilization sampled every second, that run's final evaluation, and tests/integration/test_cuda.py.
#
#   bash .whl/gpu_wheels.sh install && export PYTHONPATH=/tmp/site && bash launch/benchmark/gpu_session.sh
#
# Everything lands in $OUT (the device tool's folder) or ./gpu-session; each step has its own time limit, so a
# slow step costs its own figure, not the rest. RUN_SECONDS sets the run's training time (default 150).
set -uo pipefail
OUT=${OUT:-gpu-session}
PY=${PY:-python3}
RUN_SECONDS=${RUN_SECONDS:-150}
mkdir -p "$OUT"
step() { echo "== $(date +%T) $*"; }

step "host"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
lscpu > "$OUT/lscpu.txt" 2>&1
lscpu -e > "$OUT/lscpu-e.txt" 2>&1
$PY -c "import json, launch.machine as m; print(json.dumps(m.describe_machine(), indent=1))" > "$OUT/machine.json" 2>&1
cat "$OUT/gpu.csv" "$OUT/machine.json"

for k in 14 16; do
  step "env ceiling at $k processes"
  timeout 90 $PY -m launch.benchmark --stages env_ceiling --actors "$k" --seconds 10 --rounds 1 \
      --json "$OUT/ceiling-$k.json" > "$OUT/ceiling-$k.log" 2>&1
  tail -3 "$OUT/ceiling-$k.log"
done

step "learner stage, batch 64"
timeout 120 $PY -m launch.benchmark --stages learner --run.learner.micro-batch 64 --run.learner.accum-steps 1 \
    --json "$OUT/learner.json" > "$OUT/learner.log" 2>&1
tail -12 "$OUT/learner.log"

step "14 actors, 16 samples per transition, ${RUN_SECONDS}s of training"
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits -l 1 > "$OUT/gpu-util.csv" &
SMI=$!
timeout $((RUN_SECONDS + 150)) $PY -m launch.local --actors 14 --actor.eps-anneal-steps 7143 --total-env-steps 300000 \
    --learner.samples-per-insert 16 --learner.lr 1e-4 --learner.micro-batch 64 --learner.accum-steps 1 \
    --duration "$RUN_SECONDS" --run-dir "$OUT/runs" --label gpu-r16 --no-progress > "$OUT/run.log" 2>&1
kill $SMI 2>/dev/null
grep -E "run folder|Epoch .*(0|5) -|stopped after|Learner waiting" "$OUT/run.log" | tail -6
awk -F', ' '{s += $2; n += 1; if ($2 > m) m = $2} END {if (n) printf "GPU utilization: mean %.1f%%, max %d%%, %d samples\n", s / n, m, n}' \
    "$OUT/gpu-util.csv" | tee "$OUT/gpu-util.txt"

step "final evaluation of that run"
run=$(ls -d "$OUT"/runs/*/ 2>/dev/null | tail -1)
[ -n "$run" ] && [ ! -f "$run/eval_final.json" ] && timeout 120 $PY -m launch.final_eval "$run" > "$OUT/final-eval.log" 2>&1
tail -4 "$OUT/final-eval.log" 2>/dev/null

step "test_cuda"
timeout 150 $PY -m pytest -q -p no:cacheprovider tests/integration/test_cuda.py > "$OUT/test-cuda.log" 2>&1
tail -3 "$OUT/test-cuda.log"
step "done"
