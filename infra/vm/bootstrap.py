"""The node start-up script: uv, a venv with the client's exact Ray (and the job's packages), then `ray start`.

It runs as cloud-init / GCE's startup-script runner run it: root, no HOME, almost empty environment,
cwd /. Everything it prints goes to $NODE_DIR/boot.log (readable over SSH) as well as to the console.
It ends by writing $NODE_DIR/ready, or $NODE_DIR/failed with the reason: dlrun waits for one of them.
Every value that came from a user or the catalog is shell-quoted; no secret is ever put here
(the script lands in instance metadata / user-data, readable by anyone with describe rights).

What it needs from the image: python3 >= 3.10 (any stock Ubuntu/Debian cloud image has it: cloud-init is
written in Python) and a route to a package index. Stock images ship python3 without `venv`/`ensurepip`
(python3-venv) and without pip, so the script brings its own installer: uv's wheel, fetched from the
package index with python3's standard library and checked against the sha256 pinned here (get_uv.py).
uv makes the venv and installs everything; no apt, no pip on the image.

A second run on the same disk (the cloud restarted the VM after a host event) finds the Ray token that
dlrun handed over at first boot in $NODE_DIR/ray_token and rejoins at once; it never waits for a token.
"""
from __future__ import annotations

import shlex
from pathlib import Path

from infra.base import BootstrapConfig
from infra.vm import container_boot as cb
from infra.vm import gpu_check

NODE_DIR = "/var/lib/dlrun"
BASE_PACKAGES = ("torch", "scikit-learn", "numpy")
# a uv venv has no pip of its own, and Ray's pip runtime_env (how dlrun passes a job's `requirements:`)
# clones this venv and runs `python -m pip install` in the clone (ray/_private/runtime_env/pip.py)
VENV_TOOLS = ("pip",)
# a worker usually boots before the head has finished installing Ray: keep trying to join
JOIN_ATTEMPTS = 90
JOIN_RETRY_S = 10
# a restarted worker joins a head that is already up (or gone): a minute, then it reports failed
REJOIN_ATTEMPTS = 6
MIN_PYTHON = (3, 10)  # Ray 2.60's wheels are cp310 and newer
PYPI_INDEX = "https://pypi.org/simple"  # the default PEP 503 index (config.yaml mirrors.pypi replaces it)
# uv, pinned: release 0.13.9 of 2026-11-17; wheel names and sha256 as PyPI publishes them
# (https://pypi.org/project/uv/0.13.9/#files, checked 2026-11-26). The manylinux_2_17 wheels run on glibc
# >= 2.17 (Ubuntu 18.04+, Debian 10+); the aarch64 one is also tagged musllinux (a static build).
UV_VERSION = "0.13.9"
UV_WHEELS = {
    "x86_64": ("uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
               "d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19"),
    "aarch64": ("uv-0.13.9-py3-none-manylinux_2_17_aarch64.manylinux2014_aarch64.musllinux_1_1_aarch64.whl",
                "5435c5ce14a56431208ca0996416d310f1598e8c2c8ba707688985a16bb82dbe"),
}

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
BOOTS=$(( $(cat "$NODE_DIR/boots" 2>/dev/null || echo 0) + 1 )); echo "$BOOTS" > "$NODE_DIR/boots"
# EC2 runs user-data once per instance (cloud-init's scripts_user, from /var/lib/cloud/instance/scripts/):
# to run again after a reboot (a scheduled maintenance event) this script puts itself among cloud-init's
# per-boot scripts (/var/lib/cloud/scripts/per-boot/, run at every later boot). GCE runs its
# startup-script at every boot by itself.
case "$0" in /var/lib/cloud/instance/scripts/*|/var/lib/cloud/instances/*/scripts/*)
  install -D -m 700 "$0" /var/lib/cloud/scripts/per-boot/dlrun-boot.sh;; esac
echo "dlrun boot $BOOTS of this disk starts at $(date -u +%%FT%%TZ)"
# uv: its cache next to the venv (same file system: files are hard-linked, not copied), never a Python
# download (the image's python3 is the one), the system's CA certificates (a corporate mirror's CA)
export UV_CACHE_DIR="$NODE_DIR/uv-cache" UV_PYTHON_DOWNLOADS=never UV_SYSTEM_CERTS=1 UV_NO_PROGRESS=1 NO_COLOR=1
'''

# the boot's installs: one uv command each; a failure names what is missing, with uv's own words
_UV_INSTALL = r'''uv_install() {  # WHAT WHERE ARGS...: `uv pip install ARGS` into the venv, or fail the boot saying why
  local what="$1" where="$2" log="$NODE_DIR/uv-install.log" missing; shift 2
  echo "installing $what from $where"
  if "${UVC[@]}" pip install --python "$VENV/bin/python" "$@" 2>&1 | tee "$log"; then return 0; fi
  missing=$(sed -n 's/.*Because \([^ ]*\) was not found in the package registry.*/\1/p' "$log" | head -n 1)
  [ -z "$missing" ] || fail "package $missing not found on $where (installing $what)"
  fail "could not install $what from $where: $(grep -v '^[[:space:]]*$' "$log" | tail -n 6 | tr -s ' \n' '  ' | head -c 600)"
}'''  # noqa: E501  (one bash line of the boot script: split, its last lines would need a variable under set -e)

WATCHDOG = (Path(__file__).with_name("watchdog.sh")).read_text()
# get_uv.py without its docstring: AWS takes at most 16 KB of user-data
GET_UV = (Path(__file__).with_name("get_uv.py")).read_text().split('"""', 2)[2].lstrip("\n")
HEARTBEAT_FILE = ".dlrun-heartbeat"  # touched over SSH by dlrun while it watches (login user's home)
TOKEN_WAIT_S = 1800  # how long a node waits for dlrun to hand it the cluster's Ray token over SSH
TOKEN_FILE = ".dlrun-ray-token"  # where dlrun puts it, in the login user's home (0600)


def _self_end(cfg: BootstrapConfig) -> list[str]:
    """$NODE_DIR/self-end.sh: what the watchdog runs to end the node before it powers off (see watchdog.sh)."""
    if not cfg.self_end:
        return ['rm -f "$NODE_DIR/self-end.sh"']
    return [f"cat > \"$NODE_DIR/self-end.sh\" <<'DLRUN_SELF_END'\n#!/bin/bash\n{cfg.self_end.rstrip()}\nDLRUN_SELF_END",
            'chmod 700 "$NODE_DIR/self-end.sh"']


def python_check() -> list[str]:
    """The image's python3, at least MIN_PYTHON, in $PY."""
    need = ".".join(map(str, MIN_PYTHON))
    return [
        f'PY=$(command -v python3) || fail "this image has no python3 (dlrun needs python3 >= {need} on the image)"',
        'PYV=$("$PY" -c \'import sys; print("%d.%d" % sys.version_info[:2])\') || fail "$PY does not run"',
        f'"$PY" -c \'import sys; sys.exit(sys.version_info[:2] < {MIN_PYTHON!r})\' '
        f'|| fail "this image\'s python3 is $PYV ($PY); dlrun needs python3 >= {need}"',
        'echo "python3: $PY ($PYV)"',
    ]


def uv_lines(cfg: BootstrapConfig) -> list[str]:
    """uv in $UV (fetched from the package index unless this disk has it already) and the venv in $VENV,
    made from the image's python3 with its system site-packages (a deep-learning image's own packages stay
    importable; uv itself does not count them as installed, astral-sh/uv#4466)."""
    pins = " ".join(shlex.quote(f"{arch}={name}={sha}") for arch, (name, sha) in UV_WHEELS.items())
    version = shlex.quote(UV_VERSION)
    return [
        f"PIP_INDEX={shlex.quote(cfg.pip_index_url or PYPI_INDEX)}",
        'UV="$NODE_DIR/bin/uv"',
        f'if [ -x "$UV" ] && [ "$("$UV" --version 2>/dev/null | cut -d" " -f2)" = {version} ]; then',
        '  echo "uv: $UV (from an earlier boot of this disk)"',
        "else",
        f'  echo "fetching uv {UV_VERSION} for $(uname -m) from $PIP_INDEX"',
        f'  WHY=$("$PY" - "$PIP_INDEX" "$NODE_DIR/bin" "$(uname -m)" {version} {pins} <<\'DLRUN_GET_UV\'\n'
        f"{GET_UV}DLRUN_GET_UV\n  ) || fail \"${{WHY:-fetching uv failed (see the boot log)}}\"",
        "fi",
        'UVC=("$UV")  # how uv runs (container_boot.py runs it inside the job\'s image)',
        _UV_INSTALL,
    ]


def venv_lines() -> list[str]:
    return ['VENV="$NODE_DIR/venv"',
            '[ -x "$VENV/bin/python" ] || "$UV" venv --system-site-packages --python "$PY" "$VENV" '
            '|| fail "uv could not make a venv from $PY"']


def install_lines(cfg: BootstrapConfig, packages: list[str]) -> list[str]:
    """`packages` into the venv from the PyPI index (the planned torch first, from its own index, and held
    to its requirement afterwards so that no later package replaces that build)."""
    lines = [*gpu_check.torch_install(cfg)]
    args = ['--index-url "$PIP_INDEX"']
    if cfg.torch_requirement and cfg.torch_index_url:
        lines.append(f"printf '%s\\n' {shlex.quote(cfg.torch_requirement)} > \"$NODE_DIR/constraints.txt\"")
        args.append('--constraint "$NODE_DIR/constraints.txt"')
    if packages:
        what = shlex.quote(" ".join(packages))
        pkgs = " ".join(shlex.quote(p) for p in packages)
        lines.append(f'uv_install {what} "$PIP_INDEX" {" ".join(args)} {pkgs}')
    return lines


def prologue(node_dir: str = NODE_DIR) -> str:
    """The script's head: bash settings, the node directory, the boot log, `fail`, uv's environment."""
    return _PROLOGUE % {"node_dir": node_dir}


def install_phase(cfg: BootstrapConfig, packages: list[str]) -> list[str]:
    """From the image's python3 to a venv holding `packages` (and the planned torch), the GPU checked."""
    return [
        *python_check(),
        *gpu_check.nvidia_smi_check(cfg),  # before any download: a node without its GPU fails in a second
        *uv_lines(cfg),
        *venv_lines(),
        'export PATH="$VENV/bin:$PATH"  # Ray workers and job drivers inherit it: `python` is the venv\'s',
        *install_lines(cfg, packages),
        *gpu_check.torch_cuda_check(cfg, '"$VENV/bin/python"'),
    ]


def token_lines(login_user: str) -> list[str]:
    """The cluster's Ray token in $NODE_DIR/ray_token, and Ray's token auth in the environment.

    The token arrives over SSH (never in this script: user-data and metadata are readable by anyone with
    describe rights); the login user may not exist yet when this starts (GCE's guest agent). A second run on
    this disk (a restart after a host event) has it already: no token is handed over again, so it rejoins with
    that one at once."""
    return [
        'if [ -s "$NODE_DIR/ray_token" ]; then',
        '  RESTART=1 JOINED_AS="(a restart: boot $BOOTS of this disk)"',
        '  echo "this disk booted before and holds the cluster\'s Ray token: a restart; rejoining with that token"',
        "else",
        '  RESTART=0 JOINED_AS=""',
        '  echo "waiting for the cluster\'s Ray token over SSH"',
        f"  for i in $(seq 1 {TOKEN_WAIT_S}); do",
        f"    HOME_DIR=$(getent passwd {shlex.quote(login_user)} | cut -d: -f6)",
        f'    [ -n "$HOME_DIR" ] && [ -s "$HOME_DIR/{TOKEN_FILE}" ] && break; sleep 1',
        "  done",
        f'  [ -n "$HOME_DIR" ] && [ -s "$HOME_DIR/{TOKEN_FILE}" ] || fail "no Ray token arrived over SSH"',
        f'  install -m 600 "$HOME_DIR/{TOKEN_FILE}" "$NODE_DIR/ray_token" && rm -f "$HOME_DIR/{TOKEN_FILE}"',
        "fi",
        'export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$NODE_DIR/ray_token"',
    ]


def startup_script(cfg: BootstrapConfig, *, is_head: bool, head_ip: str | None = None,
                   cluster_id: str = "", node_dir: str = NODE_DIR, login_user: str = "ubuntu") -> str:
    """A bash script for cloud-init (AWS user-data) or GCE `startup-script` metadata. With cfg.container_image
    the Ray node runs in that image (container_boot.py); else in a venv of the image's python3."""
    if not is_head and not head_ip:
        raise ValueError("a worker node needs the head's private IP")
    image = bool(cfg.container_image)
    base = () if image else BASE_PACKAGES  # an image is the job's environment: no torch of dlrun's choosing
    packages = [f"ray[default,train]=={cfg.ray_version}", *base, *VENV_TOOLS, *cfg.python_packages]
    if cfg.torch_requirement and not image:  # the planned torch: from its own wheel index, first (else with the rest)
        packages = [p for p in packages if not gpu_check.is_torch(p)]
        if not cfg.torch_index_url:
            packages.insert(1, cfg.torch_requirement)
    packages = list(dict.fromkeys(packages))  # a package both the job and the provider ask for (the bucket client)
    # the console script is absent when Ray came with the image
    ray = '"${RAYC[@]}"' if image else '"$VENV/bin/python" -m ray.scripts.scripts'
    if is_head:
        # dashboard and Jobs API on loopback only: dlrun reaches them through an SSH tunnel
        start = [f'{ray} start --head --node-ip-address="$NODE_IP" --port={int(cfg.ray_port)} '
                 f"--dashboard-host=127.0.0.1 --dashboard-port={int(cfg.dashboard_port)} --disable-usage-stats"]
    else:
        address = shlex.quote(f"{head_ip}:{int(cfg.ray_port)}")
        start = [
            f'ATTEMPTS={JOIN_ATTEMPTS}; if [ "$RESTART" = 1 ]; then ATTEMPTS={REJOIN_ATTEMPTS}; fi',
            f'for attempt in $(seq 1 "$ATTEMPTS"); do '
            f'{ray} start --address={address} --node-ip-address="$NODE_IP" --disable-usage-stats && break; '
            f'[ "$attempt" = "$ATTEMPTS" ] && fail "could not join the head at "{shlex.quote(head_ip or "")}'
            f'" in $ATTEMPTS tries $JOINED_AS"; '
            f"sleep {JOIN_RETRY_S}; done",
        ]
    if image:
        before_token = [*python_check(), *gpu_check.nvidia_smi_check(cfg), *uv_lines(cfg), *cb.runtime_lines(cfg)]
        after_token = [*cb.credential_lines(), *cb.pull_lines(cfg), *cb.python_lines(MIN_PYTHON),
                       *cb.ray_lines(cfg, packages)]
    else:
        before_token, after_token = install_phase(cfg, packages), []
    node_ip = ["NODE_IP=$(hostname -I 2>/dev/null | awk '{print $1}')",
               '[ -n "$NODE_IP" ] || NODE_IP=$(ip -4 -o addr show scope global | awk \'{print $4}\' | cut -d/ -f1 '
               '| head -n1)']
    return "\n".join([
        prologue(node_dir),
        f'echo {shlex.quote(cluster_id)} > "$NODE_DIR/cluster"',
        # first, so that a boot that hangs later still ends with the VM powered off
        f"cat > \"$NODE_DIR/watchdog.sh\" <<'DLRUN_WATCHDOG'\n{WATCHDOG}DLRUN_WATCHDOG",
        *_self_end(cfg),
        f'setsid nohup bash "$NODE_DIR/watchdog.sh" {int(cfg.heartbeat_timeout_s)} {int(cfg.max_run_s)} '
        f'{shlex.quote(login_user)} "$NODE_DIR/self-end.sh" < /dev/null &',  # prints to the console and boot log
        *before_token,
        # a job's own installs (Ray's runtime_env pip, a script's pip or uv) use the same index
        'export PIP_INDEX_URL="$PIP_INDEX" UV_DEFAULT_INDEX="$PIP_INDEX"',
        *token_lines(login_user),
        *after_token,
        *node_ip,
        *(cb.node_container_lines(cfg) if image else []),
        *start,
        *(cb.after_start_lines(cfg) if image else []),
        'touch "$NODE_DIR/ready"',
        'echo "dlrun boot done"',
        "",
    ])
