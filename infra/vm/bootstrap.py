"""The node start-up script: install the client's exact Ray (and the job's packages), then `ray start`.

Every value that came from a user or the catalog is shell-quoted; no secret is ever put here
(the script lands in instance metadata / user-data, readable by anyone with describe rights).
"""
from __future__ import annotations

import shlex

from infra.base import BootstrapConfig

BASE_PACKAGES = ("torch", "scikit-learn", "numpy")
# a worker usually boots before the head has finished installing Ray: keep trying to join
JOIN_ATTEMPTS = 90
JOIN_RETRY_S = 10


def startup_script(cfg: BootstrapConfig, *, is_head: bool, head_ip: str | None = None,
                   cluster_id: str = "") -> str:
    """A bash script for cloud-init (AWS user-data) or GCE `startup-script` metadata."""
    if not is_head and not head_ip:
        raise ValueError("a worker node needs the head's private IP")
    packages = [f"ray[default,train]=={cfg.ray_version}", *BASE_PACKAGES, *cfg.python_packages]
    pip = " ".join(shlex.quote(p) for p in packages)
    if is_head:
        # dashboard and Jobs API on loopback only: dlrun reaches them through an SSH tunnel
        start = (f"ray start --head --port={int(cfg.ray_port)} --dashboard-host=127.0.0.1 "
                 f"--dashboard-port={int(cfg.dashboard_port)} --disable-usage-stats")
    else:
        address = shlex.quote(f"{head_ip}:{int(cfg.ray_port)}")
        start = (f"for attempt in $(seq 1 {JOIN_ATTEMPTS}); do "
                 f"ray start --address={address} --disable-usage-stats && break; "
                 f"[ \"$attempt\" = {JOIN_ATTEMPTS} ] && exit 1; sleep {JOIN_RETRY_S}; done")
    return "\n".join([
        "#!/bin/bash",
        "# written by dlrun: installs Ray and starts this node",
        "set -euxo pipefail",
        "export RAY_USAGE_STATS_ENABLED=0 PIP_BREAK_SYSTEM_PACKAGES=1",
        'DLRUN_NODE_DIR="${DLRUN_NODE_DIR:-/var/lib/dlrun}"',
        'mkdir -p "$DLRUN_NODE_DIR"',
        f'echo {shlex.quote(cluster_id)} > "$DLRUN_NODE_DIR/cluster"',
        "PY=$(command -v python3)",
        'export PATH="$(dirname "$PY"):$HOME/.local/bin:$PATH"',
        "$PY -m pip install --upgrade pip || true",
        f"$PY -m pip install {pip}",
        start,
        'touch "$DLRUN_NODE_DIR/ready"',
        "",
    ])
