#!/bin/bash
# dlrun's node watchdog: ends this VM (EC2 terminates a powered-off instance; on GCE END_SCRIPT deletes it) when dlrun's heartbeat has been
# silent for IDLE_S seconds (dlrun, or its detached supervisor, touches ~LOGIN_USER/.dlrun-heartbeat
# over SSH every minute while it watches), and unconditionally after HARD_S seconds (0: no limit).
# A forgotten cluster — a laptop asleep, dlrun killed, the network gone — stops costing money.
# END_SCRIPT, when it exists, runs first: on clouds where a guest power-off only stops the instance
# (Compute Engine), it has the cloud delete this node; the power-off follows whatever it does.
IDLE_S="$1"; HARD_S="$2"; LOGIN_USER="$3"; END_SCRIPT="${4:-}"
# checked every tenth of the idle limit (1..20 s): a VM is never paid for much past its limit
CHECK_S=$((IDLE_S / 10)); [ "$CHECK_S" -gt 20 ] && CHECK_S=20; [ "$CHECK_S" -lt 1 ] && CHECK_S=1
START=$(date +%s)
while sleep "$CHECK_S"; do
  NOW=$(date +%s)
  HOME_DIR=$(getent passwd "$LOGIN_USER" | cut -d: -f6)
  BEAT=$(stat -c %Y "$HOME_DIR/.dlrun-heartbeat" 2>/dev/null || echo "$START")
  [ "$BEAT" -lt "$START" ] && BEAT="$START"
  if [ "$HARD_S" -gt 0 ] && [ $((NOW - START)) -ge "$HARD_S" ]; then
    WHY="it has run ${HARD_S}s, the job's deadline plus a margin"
  elif [ $((NOW - BEAT)) -ge "$IDLE_S" ]; then
    WHY="no heartbeat from dlrun for $((NOW - BEAT))s (limit ${IDLE_S}s)"
  else
    continue
  fi
  echo "dlrun watchdog: powering off: $WHY"
  if [ -n "$END_SCRIPT" ] && [ -x "$END_SCRIPT" ]; then
    echo "dlrun watchdog: running $END_SCRIPT"
    "$END_SCRIPT" || echo "dlrun watchdog: $END_SCRIPT exited with $?"
  fi
  sync
  shutdown -h now "dlrun watchdog" || poweroff || halt -p
  exit 0
done
