#!/usr/bin/env bash
# Issue 84's Compose drill: a run that meets its faults and still finishes, once. CURVE, the held ratio, 4 leasing
# actor replicas on 4 slots, the runs volume on a small tmpfs (docker/compose.drill.yml). One replica's python is
# SIGKILLed at ACTOR_KILL_AT s (its container restarts and leases again); the learner's python is SIGKILLed at
# LEARNER_KILL_AT s (restart: on-failure resumes the last checkpoint and the replay saved with it); the runs volume is
# filled from DISK_FULL_AT s for DISK_FULL_FOR s (weights keep reaching the actors; refused writes are said and written
# again); the run reaches its budget (BUDGET env steps), evaluates once and exits 0, and must stay exited for
# FINISHED_FOR s (a finished run is not restarted). Prints the checks; exits 1 if one fails. Needs the built image
# (docs/deployment.md) and root for the host-side kills.
#   bash docker/finish_drill.sh [OUT]        # OUT: where logs and the run folder are copied (default ./drill-out)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-drill-out}; rm -rf "$OUT"; mkdir -p "$OUT"
ACTOR_KILL_AT=${ACTOR_KILL_AT:-240} LEARNER_KILL_AT=${LEARNER_KILL_AT:-480} DISK_FULL_AT=${DISK_FULL_AT:-660}
DISK_FULL_FOR=${DISK_FULL_FOR:-120} FINISHED_FOR=${FINISHED_FOR:-60} GUARD=${GUARD:-3600} BUDGET=${BUDGET:-90000}
IMAGE=${WARPPIPE_IMAGE:-warppipe:latest}
DC="docker-compose -f docker/compose.yml -f docker/compose.drill.yml -p warpdrill"
export WARPPIPE_SLOTS=4 WARPPIPE_ACTOR_REPLICAS=4
export WARPPIPE_RUN_ARGS="--replay.capacity 8000 --total-env-steps $BUDGET"  # the replay fills in minutes
stamp() { echo "$(date +%T) $*" | tee -a "$OUT/events.log"; }
in_volume() { docker run --rm -v warpdrill_runs:/runs --user root --entrypoint sh "$IMAGE" -c "$1"; }
python_of() { pgrep -P "$(docker inspect -f '{{.State.Pid}}' "$1")" | head -1; }  # the python under tini
learner_state() { docker inspect -f '{{.State.Status}} {{.State.ExitCode}} {{.RestartCount}}' "$($DC ps -q learner)" 2>/dev/null || echo "unknown - -"; }
$DC down -v >/dev/null 2>&1 || true
stamp "up (budget $BUDGET env steps)"; $DC up -d --no-build --scale actor=4 >>"$OUT/events.log" 2>&1
start=$SECONDS actor_killed=0 learner_killed=0 filled=0 emptied=0 finished_at=0
while ((SECONDS - start < GUARD)); do
  t=$((SECONDS - start))
  if ((!actor_killed && t >= ACTOR_KILL_AT)); then
    victim=$($DC ps -q actor | head -1)
    stamp "SIGKILL an actor replica's python (container ${victim:0:12})"
    kill -9 "$(python_of "$victim")" || stamp "no python found under that container"; actor_killed=1
  fi
  if ((!learner_killed && t >= LEARNER_KILL_AT)); then
    stamp "SIGKILL the learner's python"
    kill -9 "$(python_of "$($DC ps -q learner)")" || stamp "no python found under the learner's container"; learner_killed=1
  fi
  if ((!filled && t >= DISK_FULL_AT)); then
    stamp "fill the runs volume"; in_volume 'dd if=/dev/zero of=/runs/filler bs=1M 2>/dev/null; df -h /runs | tail -1' \
        >>"$OUT/events.log" 2>&1 || true
    filled=1
  fi
  if ((filled && !emptied && t >= DISK_FULL_AT + DISK_FULL_FOR)); then
    stamp "free the runs volume"; in_volume 'rm -f /runs/filler'; emptied=1
  fi
  read -r status code restarts <<<"$(learner_state)"
  if [[ $status == exited && $code == 0 ]]; then
    ((finished_at)) || { finished_at=$t; stamp "the learner exited 0 (restarts: $restarts)"; first="$status $code $restarts"; }
    ((t - finished_at >= FINISHED_FOR)) && break
  fi
  sleep 5
done
last=$(learner_state)
stamp "the learner now: $last"
$DC logs --no-color -t learner >"$OUT/learner.log"; $DC logs --no-color -t actor >"$OUT/actors.log"
mkdir -p "$OUT/runs"; in_volume 'tar -C /runs -cf - .' | tar -C "$OUT/runs" -xf - || true
$DC down -v >/dev/null 2>&1
stamp "done"
${PYTHON:-python3} - "$OUT" "${first:-never}" "$last" <<'PY'  # from the repository root, so shared/ imports
import glob, os, re, sys

out, first, last = sys.argv[1:4]
log = open(os.path.join(out, "learner.log")).read()
for line in re.findall(r"\[MAIN\] (?:accounting|replay restored|the saved replay|resumed at|stopped after|.* written again).*", log):
    print(line[:240])
checks = {
    "the learner exited 0 and stayed exited": first != "never" and first == last,
    "one final evaluation written": len(re.findall(r"\[FINAL\] wrote ", log)) == 1,
    "no batch refused as stale": "stale_weights" not in log,
    "a refused write said and written again": bool(re.search(r"not written \(.*refused so far\)", log))
    and bool(re.search(r"written again after \d+ refused", log)),
    "the killed learner resumed": "[MAIN] resumed at" in log,
    "its replay came back from the last checkpoint": "[MAIN] replay restored from" in log,
    "no batch taken twice": bool(re.search(r"\[MAIN\] accounting: .*duplicates 0,", log)),
}
for name, ok in checks.items():
    print(("ok    " if ok else "FAILED"), name)
sys.exit(0 if all(checks.values()) else 1)
PY
