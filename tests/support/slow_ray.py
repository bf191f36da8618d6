"""A `ray` executable for dlrun's local head (DLRUN_RAY_BIN) that makes the start slow or failing at the
process boundary, the way a first start in a cold venv on a busy machine is:

- `delay_s`: sleeps before it execs the real `ray` (Python importing Ray's packages from a cold disk cache
  on a loaded 2-core machine took 30+ s in issue 35; the wait is the same to dlrun);
- `fail_first`: its first run leaves what a failed Ray start leaves (a process in the head's group, one that
  left the group with setsid, as a Ray process started in a session of its own would, and files in the head's
  temp dir), prints Ray's own error line and exits 1, as `ray start --head` does when the node did not register
  in time ("The current node timed out during startup", ray/_private/node.py in Ray 2.60);
- `always_fail`: every run does that.

Each run appends a line to `runs.log` beside the script: `run N temp_dir stray_pid group_pid`.
Not reproduced: which of Ray's processes is slow (the raylet, the GCS, the dashboard): only the whole start.
"""
from __future__ import annotations

import shlex
from pathlib import Path

RAY_TIMEOUT = ("Exception: The current node timed out during startup. This could happen because some of the "
               "raylet failed to startup or the GCS has become overloaded.")


def slow_ray(where: Path, real_ray: str, *, delay_s: float = 0.0, fail_first: bool = False,
             always_fail: bool = False) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    script = where / "ray"
    runs = where / "runs.log"
    fails = "true" if always_fail else ('[ "$n" = 1 ]' if fail_first else "false")
    script.write_text(f"""#!/bin/bash
n=$(( $(cat {shlex.quote(str(runs))} 2>/dev/null | wc -l) + 1 ))
td=""
for a in "$@"; do case "$a" in --temp-dir=*) td="${{a#--temp-dir=}}";; esac; done
if {fails}; then
  mkdir -p "$td/session_fake/logs" && echo "raylet did not register" > "$td/session_fake/logs/raylet.err"
  setsid python3 -c "import time; time.sleep(600)" "$td/session_fake/stray" </dev/null >/dev/null 2>&1 &
  stray=$!
  sleep 600 </dev/null >/dev/null 2>&1 &
  echo "run $n $td $stray $!" >> {shlex.quote(str(runs))}
  sleep 1
  echo {shlex.quote(RAY_TIMEOUT)} >&2
  exit 1
fi
echo "run $n $td - -" >> {shlex.quote(str(runs))}
sleep {delay_s}
exec {shlex.quote(real_ray)} "$@"
""")
    script.chmod(0o755)
    return script


def runs(script: Path) -> list[list[str]]:
    """The runs so far: [n, temp_dir, stray_pid, group_pid] each ("-" where none was left)."""
    log = script.parent / "runs.log"
    return [line.split()[1:] for line in log.read_text().splitlines()] if log.exists() else []
