"""The node start-up script: a venv with the client's exact Ray (and the job's packages), then `ray start`.

It runs as cloud-init / GCE's startup-script runner run it: root, no HOME, almost empty environment,
cwd /. Everything it prints goes to $NODE_DIR/boot.log (readable over SSH) as well as to the console.
It ends by writing $NODE_DIR/ready, or $NODE_DIR/failed with the reason: dlrun waits for one of them.
Every value that came from a user or the catalog is shell-quoted; no secret is ever put here
(the script lands in instance metadata / user-data, readable by anyone with describe rights).
"""
from __future__ import annotations

import shlex
from pathlib import Path

from infra.base import BootstrapConfig
from infra.vm import gpu_check

NODE_DIR = "/var/lib/dlrun"
BASE_PACKAGES = ("torch", "scikit-learn", "numpy")
# a worker usually boots before the head has finished installing Ray: keep trying to join
JOIN_ATTEMPTS = 90
JOIN_RETRY_S = 10

_PROLOGUE = r'''#!/bin/bash
# written by dlrun: installs Ray into a venv and starts this node
set -uo pipefail
export HOME="${HOME:-/root}" RAY_USAGE_STATS_ENABLED=0 PIP_DISABLE_PIP_VERSION_CHECK=1
NODE_DIR="${DLRUN_NODE_DIR:-%(node_dir)s}"
mkdir -p "$NODE_DIR" && chmod 755 "$NODE_DIR"
rm -f "$NODE_DIR/ready" "$NODE_DIR/failed"
exec > >(tee -a "$NODE_DIR/boot.log") 2>&1
fail() { echo "dlrun boot failed: $1"; echo "$1" > "$NODE_DIR/failed"; exit 1; }
trap 'fail "line $LINENO: \`$BASH_COMMAND\` exited with $?"' ERR
set -eE
'''


WATCHDOG = (Path(__file__).with_name("watchdog.sh")).read_text()
HEARTBEAT_FILE = ".dlrun-heartbeat"  # touched over SSH by dlrun while it watches (login user's home)
TOKEN_WAIT_S = 1800  # how long a node waits for dlrun to hand it the cluster's Ray token over SSH
TOKEN_FILE = ".dlrun-ray-token"  # where dlrun puts it, in the login user's home (0600)


def _self_end(cfg: BootstrapConfig) -> list[str]:
    """$NODE_DIR/self-end.sh: what the watchdog runs to end the node before it powers off (see watchdog.sh)."""
    if not cfg.self_end:
        return ['rm -f "$NODE_DIR/self-end.sh"']
    return [f"cat > \"$NODE_DIR/self-end.sh\" <<'DLRUN_SELF_END'\n#!/bin/bash\n{cfg.self_end.rstrip()}\nDLRUN_SELF_END",
            'chmod 700 "$NODE_DIR/self-end.sh"']


def startup_script(cfg: BootstrapConfig, *, is_head: bool, head_ip: str | None = None,
                   cluster_id: str = "", node_dir: str = NODE_DIR, login_user: str = "ubuntu") -> str:
    """A bash script for cloud-init (AWS user-data) or GCE `startup-script` metadata."""
    if not is_head and not head_ip:
        raise ValueError("a worker node needs the head's private IP")
    packages = [f"ray[default,train]=={cfg.ray_version}", *BASE_PACKAGES, *cfg.python_packages]
    if cfg.torch_requirement:  # the planned torch comes from its own wheel index, first
        packages = [p for p in packages if not gpu_check.is_torch(p)]
    pip = " ".join(shlex.quote(p) for p in packages)
    ray = '"$VENV/bin/python" -m ray.scripts.scripts'  # the console script is absent when Ray came with the image
    if is_head:
        # dashboard and Jobs API on loopback only: dlrun reaches them through an SSH tunnel
        start = (f'{ray} start --head --node-ip-address="$NODE_IP" --port={int(cfg.ray_port)} '
                 f"--dashboard-host=127.0.0.1 --dashboard-port={int(cfg.dashboard_port)} --disable-usage-stats")
    else:
        address = shlex.quote(f"{head_ip}:{int(cfg.ray_port)}")
        start = (f"for attempt in $(seq 1 {JOIN_ATTEMPTS}); do "
                 f'{ray} start --address={address} --node-ip-address="$NODE_IP" --disable-usage-stats && break; '
                 f'[ "$attempt" = {JOIN_ATTEMPTS} ] && fail {shlex.quote(f"could not join the head at {head_ip}")}; '
                 f"sleep {JOIN_RETRY_S}; done")
    return "\n".join([
        _PROLOGUE % {"node_dir": node_dir},
        f'echo {shlex.quote(cluster_id)} > "$NODE_DIR/cluster"',
        # first, so that a boot that hangs later still ends with the VM powered off
        f"cat > \"$NODE_DIR/watchdog.sh\" <<'DLRUN_WATCHDOG'\n{WATCHDOG}DLRUN_WATCHDOG",
        *_self_end(cfg),
        f'setsid nohup bash "$NODE_DIR/watchdog.sh" {int(cfg.heartbeat_timeout_s)} {int(cfg.max_run_s)} '
        f'{shlex.quote(login_user)} "$NODE_DIR/self-end.sh" < /dev/null &',  # prints to the console and boot log
        'PY=$(command -v python3) || fail "this image has no python3"',
        'VENV="$NODE_DIR/venv"',
        # system site-packages: what the image already has (a deep-learning image's torch) is reused
        '[ -x "$VENV/bin/python" ] || "$PY" -m venv --system-site-packages "$VENV"',
        'export PATH="$VENV/bin:$PATH"  # Ray workers and job drivers inherit it: `python` is the venv\'s',
        *gpu_check.nvidia_smi_check(cfg),
        *gpu_check.torch_install(cfg, '"$VENV/bin/python" -m pip'),
        f'"$VENV/bin/python" -m pip install {pip} || fail {shlex.quote("pip could not install " + " ".join(packages))}',
        *gpu_check.torch_cuda_check(cfg, '"$VENV/bin/python"'),
        # Ray's token arrives over SSH (never in this script: user-data and metadata are readable by anyone
        # with describe rights); the login user may not exist yet when this starts (GCE's guest agent)
        'echo "waiting for the cluster\'s Ray token over SSH"',
        f"for i in $(seq 1 {TOKEN_WAIT_S}); do",
        f"  HOME_DIR=$(getent passwd {shlex.quote(login_user)} | cut -d: -f6)",
        f'  [ -n "$HOME_DIR" ] && [ -s "$HOME_DIR/{TOKEN_FILE}" ] && break; sleep 1',
        "done",
        f'[ -n "$HOME_DIR" ] && [ -s "$HOME_DIR/{TOKEN_FILE}" ] || fail "no Ray token arrived over SSH"',
        f'install -m 600 "$HOME_DIR/{TOKEN_FILE}" "$NODE_DIR/ray_token" && rm -f "$HOME_DIR/{TOKEN_FILE}"',
        'export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$NODE_DIR/ray_token"',
        "NODE_IP=$(hostname -I 2>/dev/null | awk '{print $1}')",
        '[ -n "$NODE_IP" ] || NODE_IP=$(ip -4 -o addr show scope global | awk \'{print $4}\' | cut -d/ -f1 | head -n1)',
        start,
        'touch "$NODE_DIR/ready"',
        'echo "dlrun boot done"',
        "",
    ])
