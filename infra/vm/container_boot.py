"""The boot script's container part, for a job with `image:`: a container runtime, the image, and the Ray node
running inside it. bootstrap.startup_script calls these in order; the rest of the boot (watchdog, token,
readiness markers) is the same with or without an image.

- The runtime: podman or docker when the node's image has a working one (the clouds' deep-learning images ship
  docker and the NVIDIA Container Toolkit), else podman from the distribution's own packages with apt. Stock
  Ubuntu/Debian cloud images ship neither. `mirrors.apt` (config.yaml) replaces the image's apt sources for
  that install, as `mirrors.pypi` replaces PyPI; apt still checks the mirror's signatures with the image's
  archive keyring. apt waits for the lock that cloud-init / unattended-upgrades hold at a first boot.
- The image: pulled with the registry credentials dlrun hands over SSH just before the Ray token (an auth file,
  never in user-data or metadata), `--tls-verify=false` only for a registry the user listed as insecure.
  Refused with the reason when it has no python3 >= bootstrap.MIN_PYTHON (Ray runs in the image's python3).
- Ray: the image's own when it is the client's version; else the client's Ray (and the job's packages) is
  installed with the node's uv, run inside the image, into $NODE_DIR/image-venv on the node's disk: a venv of
  the image's python3 with its system site-packages, so the image's torch and libraries stay what the job
  imports. The venv survives a restart of the VM; the image's packages are never changed.
- The Ray node: one long-lived container `dlrun-ray` (host network and IPC as Ray on the VM would have, the GPUs
  passed through, $NODE_DIR mounted at the same path for the token, the venv and uv's cache), `ray start`
  exec'd into it. Ray's processes and every job driver live in the container; the watchdog stays on the VM.
"""
from __future__ import annotations

import shlex

from infra.base import BootstrapConfig
from infra.vm import gpu_check

CONTAINER = "dlrun-ray"
IMAGE_VENV = "$NODE_DIR/image-venv"
AUTH_FILE = ".dlrun-registry-auth.json"  # where dlrun puts the registry credentials (login user's home, 0600)
APT_LOCK_WAIT_S = 600
# what `<runtime> run` answers when the command is not in the image (podman: "executable file `python3` not
# found in $PATH"; docker: exit 127 "exec: \"python3\": executable file not found in $PATH")
NOT_FOUND_EXIT = 127


def runtime_lines(cfg: BootstrapConfig) -> list[str]:
    """$RT: a working podman or docker, installed from apt (the image's sources or mirrors.apt) when none."""
    where = shlex.quote(cfg.apt_mirror or "the image's apt sources")
    lines = [
        'RT=""',
        'for c in podman docker; do if command -v "$c" >/dev/null && "$c" info >/dev/null 2>&1; then '
        'RT=$(command -v "$c"); break; fi; done',
        'if [ -z "$RT" ]; then',
        '  command -v apt-get >/dev/null || fail "no podman, docker or apt-get on this VM image"',
        f'  echo "no container runtime on this image: installing podman from "{where}',
        f"  APT=(apt-get -q -o DPkg::Lock::Timeout={APT_LOCK_WAIT_S})",
    ]
    if cfg.apt_mirror:
        lines += [
            "  . /etc/os-release",
            '  C=main; [ "${ID:-}" = ubuntu ] && C="main universe"',  # Ubuntu has podman in universe
            f'  echo "deb {shlex.quote(cfg.apt_mirror)} $VERSION_CODENAME $C" > "$NODE_DIR/apt-sources.list"',
            '  APT+=(-o Dir::Etc::SourceList="$NODE_DIR/apt-sources.list" -o Dir::Etc::SourceParts=/dev/null)',
        ]
    lines += [
        '  apt_tail() { grep -E "^(E|W|Err):" "$NODE_DIR/apt.log" | tail -n 3 | tr -s "\\n" " " | head -c 400; }',
        '  DEBIAN_FRONTEND=noninteractive "${APT[@]}" update > "$NODE_DIR/apt.log" 2>&1 '
        f'|| fail "apt-get update failed (from "{where}"): $(apt_tail)"',
        '  DEBIAN_FRONTEND=noninteractive "${APT[@]}" install -y --no-install-recommends podman >> "$NODE_DIR/apt.log" '
        f'2>&1 || fail "could not install podman from "{where}": $(apt_tail)"',
        '  RT=$(command -v podman); WHY=$("$RT" info 2>&1 >/dev/null) '
        '|| fail "podman does not work: $(echo $WHY | tail -c 300)"',
        "fi",
        'RT_NAME=$(basename "$RT")',
        'echo "container runtime: $RT ($("$RT" --version 2>/dev/null | head -n 1))"',
    ]
    return lines


def credential_lines() -> list[str]:
    """After the token wait: the registry auth file dlrun handed over (if any) into $NODE_DIR (0600); a restart
    keeps the one of the first boot."""
    return [
        f'if [ -n "${{HOME_DIR:-}}" ] && [ -s "$HOME_DIR/{AUTH_FILE}" ]; then',
        f'  install -m 600 "$HOME_DIR/{AUTH_FILE}" "$NODE_DIR/registry-auth.json" && rm -f "$HOME_DIR/{AUTH_FILE}"',
        "fi",
    ]


def pull_lines(cfg: BootstrapConfig) -> list[str]:
    """The image in the runtime's store: pulled when image_pull is `always` or the store lacks it."""
    image = shlex.quote(cfg.container_image)
    lines = [f"IMAGE={image}", "PULL_ARGS=()"]
    if cfg.container_insecure:
        lines.append('[ "$RT_NAME" = podman ] && PULL_ARGS+=(--tls-verify=false) || fail "$IMAGE: docker takes a '
                     'plain-HTTP registry only from its daemon\'s insecure-registries"')
    lines += [
        'if [ -s "$NODE_DIR/registry-auth.json" ]; then',
        '  if [ "$RT_NAME" = podman ]; then PULL_ARGS+=(--authfile "$NODE_DIR/registry-auth.json")',
        '  else install -D -m 600 "$NODE_DIR/registry-auth.json" "$NODE_DIR/docker/config.json" '
        '&& export DOCKER_CONFIG="$NODE_DIR/docker"; fi',
        "fi",
    ]
    cached = '"$RT" image inspect "$IMAGE" >/dev/null 2>&1'
    pull_if = "true" if cfg.container_pull == "always" else f"! {cached}"
    lines += [
        f"if {pull_if}; then",
        '  echo "pulling $IMAGE"; PULL_T0=$(date +%s%N)',
        '  "$RT" pull "${PULL_ARGS[@]}" "$IMAGE" > "$NODE_DIR/pull.log" 2>&1 || fail "could not pull $IMAGE: '
        '$(grep -iE "error|denied|unauthorized|not found|no image" "$NODE_DIR/pull.log" | tail -n 2 | tr -s "\\n" " " '
        '| head -c 400)"',
        '  echo "pulled $IMAGE in $(( ($(date +%s%N) - PULL_T0) / 1000000 )) ms"',
        "else",
        '  echo "$IMAGE is in the runtime\'s store already"',
        "fi",
    ]
    return lines


def python_lines(min_python: tuple[int, int]) -> list[str]:
    """$IPYV: the image's python3 version, at least min_python, else the boot fails saying so."""
    need = ".".join(map(str, min_python))
    probe = shlex.quote('import sys; print("%d.%d" % sys.version_info[:2]); sys.exit(sys.version_info[:2] < '
                        f'{min_python!r})')
    return [
        'IRUN=("$RT" run --rm --network host -v "$NODE_DIR:$NODE_DIR")',
        f'IPYV=$("${{IRUN[@]}}" --entrypoint python3 "$IMAGE" -c {probe} 2> "$NODE_DIR/image-python.log") '
        '&& IPY_RC=0 || IPY_RC=$?',
        f'if [ "$IPY_RC" = {NOT_FOUND_EXIT} ] || grep -qiE "executable file .?python3.? not found|no such file" '
        '"$NODE_DIR/image-python.log"; then',
        f'  fail "image $IMAGE has no python3: dlrun runs Ray with the image\'s python3 (>= {need}); use an image '
        'with Python"',
        'elif [ "$IPY_RC" != 0 ] && [ -n "$IPYV" ]; then',
        f'  fail "image $IMAGE has python3 $IPYV; dlrun runs Ray with the image\'s python3, which must be >= {need}"',
        'elif [ "$IPY_RC" != 0 ]; then',
        '  fail "could not run python3 in $IMAGE with $RT_NAME: $(tail -n 2 "$NODE_DIR/image-python.log" | tr -s "\\n" '
        '" " | head -c 400)"',
        "fi",
        'echo "image python3: $IPYV"',
    ]


def ray_lines(cfg: BootstrapConfig, packages: list[str]) -> list[str]:
    """$PYIN: the python that runs Ray in the image: the image's, when it has the client's Ray and the job needs
    no packages; else a venv on the node's disk that uv fills inside the image (`packages`: Ray's pin first,
    left out when the image has that Ray already; its system site-packages provide it)."""
    version = shlex.quote(cfg.ray_version)
    probe = shlex.quote("import ray; print(ray.__version__)")
    ray_pin, rest = packages[0], packages[1:]
    need_venv = "true" if cfg.python_packages else f'[ "$IRAY" != {version} ]'
    return [
        f'IRAY=$("${{IRUN[@]}}" --entrypoint python3 "$IMAGE" -c {probe} 2>/dev/null | tail -n 1) || IRAY=""',
        f"PKGS=({' '.join(shlex.quote(p) for p in rest)})",
        f'[ "$IRAY" = {version} ] || PKGS=({shlex.quote(ray_pin)} "${{PKGS[@]}}")',
        f"if {need_venv}; then",
        f'  echo "the image has ${{IRAY:+Ray }}${{IRAY:-no Ray}}: installing ${{PKGS[*]}} into {IMAGE_VENV} '
        'with uv, in the image"',
        # uv runs inside the image (its binary from the node's disk): the venv is made from the image's python3
        '  UVC=("${IRUN[@]}" -e UV_CACHE_DIR -e UV_PYTHON_DOWNLOADS -e UV_NO_PROGRESS -e NO_COLOR --entrypoint "$UV" '
        '"$IMAGE")',
        f'  VENV={IMAGE_VENV}',
        '  [ -x "$VENV/bin/python" ] || "${UVC[@]}" venv --system-site-packages --python python3 "$VENV" '
        '|| fail "uv could not make a venv from the image\'s python3"',
        '  uv_install "${PKGS[*]}" "$PIP_INDEX" --index-url "$PIP_INDEX" "${PKGS[@]}"',
        '  PYIN="$VENV/bin/python" PATH_IN="$VENV/bin:"',
        "else",
        '  echo "the image has Ray $IRAY"; PYIN=python3 PATH_IN=""',
        "fi",
    ]


def gpu_flags(cfg: BootstrapConfig) -> list[str]:
    """$GPU_ARGS: the GPUs passed into the container. podman through CDI (the NVIDIA Container Toolkit's
    `nvidia-ctk cdi generate`; podman docs, "GPU support"), docker through the toolkit's `--gpus`."""
    if cfg.gpu_count <= 0:
        return ["GPU_ARGS=()"]
    return [
        'if [ "$RT_NAME" = podman ]; then',
        '  if [ ! -s /etc/cdi/nvidia.yaml ]; then',
        '    command -v nvidia-ctk >/dev/null || fail "podman passes GPUs through CDI, and this image has no '
        'nvidia-ctk '
        '(the NVIDIA Container Toolkit): use a deep-learning VM image"',
        '    nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml > "$NODE_DIR/cdi.log" 2>&1 || fail "nvidia-ctk cdi '
        'generate failed: $(tail -n 2 "$NODE_DIR/cdi.log" | tr -s "\\n" " ")"',
        "  fi",
        "  GPU_ARGS=(--device nvidia.com/gpu=all)",
        "else",
        "  GPU_ARGS=(--gpus all)",
        "fi",
    ]


def node_container_lines(cfg: BootstrapConfig) -> list[str]:
    """The long-lived container `dlrun-ray`, and $RAYC: the argv prefix that runs Ray's CLI in it."""
    keep = shlex.quote("import signal; signal.pause()")  # PID 1 of the container, until it is removed
    envs = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_USAGE_STATS_ENABLED", "PIP_INDEX_URL", "UV_DEFAULT_INDEX",
            "PIP_DISABLE_PIP_VERSION_CHECK")
    env_args = " ".join(f"-e {name}" for name in envs)  # by name: the value comes from this script's environment
    return [
        *gpu_flags(cfg),
        f'"$RT" rm -f {CONTAINER} >/dev/null 2>&1 || true',  # a restart: the last boot's container, stopped
        f'"$RT" run -d --name {CONTAINER} --network host --ipc host "${{GPU_ARGS[@]}}" -v "$NODE_DIR:$NODE_DIR" '
        f'{env_args} --entrypoint python3 "$IMAGE" -c {keep} > "$NODE_DIR/container.id" 2> "$NODE_DIR/container.log" '
        '|| fail "could not start the Ray container from $IMAGE: '
        '$(tail -n 2 "$NODE_DIR/container.log" | tr -s "\\n" " ")"',
        # exec'd processes get the container's environment (the -e above); the venv goes first on its PATH
        f"RAYC=(\"$RT\" exec {CONTAINER} sh -c 'PATH=\"$0$PATH\" exec \"$@\"' \"$PATH_IN\" \"$PYIN\" "
        "-m ray.scripts.scripts)",
        f"echo \"Ray runs in container {CONTAINER} ($RT_NAME, $(cut -c1-12 \"$NODE_DIR/container.id\"))\"",
    ]


def after_start_lines(cfg: BootstrapConfig) -> list[str]:
    """After `ray start`: on a GPU offer, torch in the container must see the GPUs."""
    why = (f"GPU check: torch.cuda.is_available() is false in {cfg.container_image}: the image's torch does not run "
           "on this driver, or the runtime did not pass the GPUs")
    return gpu_check.torch_cuda_check(cfg, f'"$RT" exec {CONTAINER} "$PYIN"', why=why)
