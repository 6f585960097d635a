#!/usr/bin/env bash
# A fault drill on Compose: CURVE, the held ratio, 4 leasing actor replicas on 4 slots. One replica's python is
# SIGKILLed at KILL_AT s (its container restarts and leases again), the learner is restarted with SIGTERM at
# RESTART_AT s (a clean stop saves replay; --resume latest reads it back), and stopped at STOP_AT s. Prints what
# the run must show: clean accounting, no stale rejects, RSS after replay filled, replay size and epsilon across
# the restart. Needs the built image (docs/deployment.md) and root for the host-side kill.
#   bash docker/soak.sh [OUT]        # OUT: where logs and the run folder are copied (default ./soak-out)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-soak-out}; rm -rf "$OUT"; mkdir -p "$OUT"
KILL_AT=${KILL_AT:-360} RESTART_AT=${RESTART_AT:-600} STOP_AT=${STOP_AT:-1200}
DC="docker-compose -f docker/compose.yml -p warpsoak"
export WARPPIPE_SLOTS=4 WARPPIPE_ACTOR_REPLICAS=4 WARPPIPE_RUN_ARGS="--replay.capacity 8000"  # fills in minutes
stamp() { echo "$(date +%T) $*" | tee -a "$OUT/events.log"; }
$DC down -v >/dev/null 2>&1 || true
stamp "up"; $DC up -d --no-build --scale actor=4 >>"$OUT/events.log" 2>&1
sleep "$KILL_AT"
victim=$($DC ps -q actor | head -1)
py=$(pgrep -P "$(docker inspect -f '{{.State.Pid}}' "$victim")" | head -1)  # the python under the container's init
stamp "SIGKILL actor container ${victim:0:12}, host pid $py"; kill -9 "$py"
sleep $((RESTART_AT - KILL_AT))
stamp "restart the learner (SIGTERM, 60 s grace)"; $DC restart -t 60 learner >>"$OUT/events.log" 2>&1
sleep $((STOP_AT - RESTART_AT))
stamp "stop the learner"; $DC stop -t 60 learner >>"$OUT/events.log" 2>&1
$DC logs --no-color -t learner >"$OUT/learner.log"; $DC logs --no-color -t actor >"$OUT/actors.log"
docker run --rm -v warpsoak_runs:/runs -v "$(realpath "$OUT")":/out --user root --entrypoint sh \
    "${WARPPIPE_IMAGE:-warppipe:latest}" -c 'cp -r /runs /out/ && chmod -R a+rX /out/runs'
$DC down -v >/dev/null 2>&1
stamp "done"
${PYTHON:-python3} - "$OUT" <<'PY'  # from the repository root, so shared/ imports
import glob, os, re, sys

from shared.evaluation.names import read_metrics
out = sys.argv[1]
log = open(os.path.join(out, "learner.log")).read()
for line in re.findall(r"\[MAIN\] (?:accounting|replay restored|resumed at|stopped after|actor \d+ now sends).*", log):
    print(line[:240])
print("stale_weights in the log:", len(re.findall("stale_weights", log)))
(path,) = glob.glob(os.path.join(out, "runs", "*", "metrics.jsonl"))
rows, _ = read_metrics(path)  # a last line the stop cut short is left out
epochs = [r for r in rows if "replay/size" in r]
cap = max(r["replay/size"] for r in epochs)
rss = [r["learner/rss_mb"] for r in epochs if r["replay/size"] >= cap]
q = len(rss) // 4
print(f"RSS after replay filled ({len(rss)} epochs): min {min(rss):.0f}, max {max(rss):.0f} MB, quartile means",
      [round(sum(rss[i * q:(i + 1) * q]) / q) for i in range(4)])
print("lost in flight:", max(r.get("replay/lost_in_flight", 0) for r in epochs),
      "rejected:", max(r.get("replay/rejected", 0) for r in epochs))
epoch = re.compile(r"Epoch (\d+) .*Epsilon: ([\d.]+), Buffer: ([\d,]*\d).*Budget: ([\d,]*\d) of")
lines = log.splitlines()
for i, line in enumerate(lines):  # the restart: the last epoch before the stop, the first after the resume
    if "[MAIN] stopped after" in line or "[MAIN] resumed at" in line:
        near = lines[i::-1] if "stopped" in line else lines[i:]
        m = next((epoch.search(x) for x in near if epoch.search(x)), None)
        if m:
            print(("before the stop" if "stopped" in line else "after the resume").ljust(16),
                  f"epoch {m[1]}: {m[4]} env steps, replay {m[3]}, epsilon {m[2]}")
PY
