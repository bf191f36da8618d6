"""Stand-ins for a VM image's container runtime (podman / docker), apt-get and nvidia-smi, for the boot
script's container part (infra/vm/container_boot.py) run by bash under the `node` fixture (boot_stubs.py).

What they reproduce, with podman's and apt's own words (podman-run(1), podman-pull(1); podman 4.3 as
Debian 12 ships it; apt 2.6):
- a stock image has no runtime: `podman` exists only after `apt-get install podman`, and apt-get finds it
  only when `update` read a source that has it (the mirror named in the sources list, or not: "E: Unable
  to locate package podman");
- `pull` refuses a private image without an auth file holding the registry's credentials (`Error:
  initializing source docker://IMAGE: reading manifest TAG in NAME: unauthorized: authentication required`)
  and a plain-HTTP registry without `--tls-verify=false` (`http: server gave HTTP response to HTTPS client`);
- `run --entrypoint python3` in an image without python3 exits 127 ("executable file `python3` not found
  in $PATH"); with python3 it answers the probe: the version, and Ray's version only when the image has it;
- `run ... --entrypoint UV IMAGE ARGS` runs uv (the uv stand-in) as if inside the image;
- `run -d`, `exec`, `rm -f`, `image inspect` (true once pulled) record their arguments.
Not reproduced: images, layers, namespaces, the GPU passthrough itself (only the arguments), docker's daemon.
"""
from __future__ import annotations

from pathlib import Path

RUNTIME_STUB = r"""#!/bin/bash
{ printf '%s' "$(basename "$0")"; printf ' %q' "$@"; echo; } >> "$STUB_LOG"
S="$STUB_DIR/runtime"
case "$1" in
  info|--version) echo "$(basename "$0") version 4.3.1"; exit 0;;
  image) [ -e "$S/pulled" ]; exit;;
  pull)
    image="${!#}"
    if [ -e "$S/plain_http" ] && [[ " $* " != *" --tls-verify=false "* ]]; then
      echo "Error: initializing source docker://$image: pinging container registry: Get \"https://...\": http: server gave HTTP response to HTTPS client" >&2; exit 125
    fi
    if [ -e "$S/needs_auth" ]; then
      auth=""; prev=""; for a in "$@"; do [ "$prev" = --authfile ] && auth="$a"; prev="$a"; done
      [ -n "$auth" ] || auth="${DOCKER_CONFIG:-/nonexistent}/config.json"
      if ! grep -q "$(cat "$S/needs_auth")" "$auth" 2>/dev/null; then
        echo "Error: initializing source docker://$image: reading manifest in $image: unauthorized: authentication required" >&2; exit 125
      fi
    fi
    touch "$S/pulled"; echo "Writing manifest to image destination"; exit 0;;
  rm) exit 0;;
  exec) exit 0;;
  run)
    shift; entry=""; detach=0
    while [ $# -gt 0 ]; do
      case "$1" in
        --entrypoint) entry="$2"; shift 2;;
        -d) detach=1; shift;;
        --rm) shift;;
        -v|-e|--name|--network|--ipc|--device|--gpus) shift 2;;
        *) break;;
      esac
    done
    shift  # the image
    if [ "$entry" = python3 ] && [ -e "$S/no_python" ]; then
      echo "Error: executable file \`python3\` not found in \$PATH: No such file or directory: OCI runtime attempted to invoke a command that was not found" >&2; exit 127
    fi
    if [ "$detach" = 1 ]; then echo 0123456789abcdef0123; exit 0; fi
    if [ "$entry" = python3 ]; then
      case "$2" in
        *"import ray"*) [ -e "$S/ray" ] && { cat "$S/ray"; exit 0; }; echo "ModuleNotFoundError: No module named 'ray'" >&2; exit 1;;
        *version_info*) echo 3.11; exit 0;;
      esac
      exit 0
    fi
    exec "$entry" "$@";;
esac
exit 0
"""

APT_STUB = r"""#!/bin/bash
{ printf 'apt-get'; printf ' %q' "$@"; echo; } >> "$STUB_LOG"
S="$STUB_DIR/runtime"; list=""
for a in "$@"; do case "$a" in Dir::Etc::SourceList=*) list="${a#Dir::Etc::SourceList=}";; esac; done
for a in "$@"; do
  case "$a" in
    update) [ -n "$list" ] && cp "$list" "$S/apt_read"; echo "Reading package lists..."; exit 0;;
    install)
      if [ -e "$S/apt_has_podman" ] && [ -e "$S/apt_read" ] && grep -q "$(cat "$S/apt_has_podman")" "$S/apt_read"; then
        cp "$STUB_DIR/bin/runtime.stub" "$STUB_DIR/bin/podman"; chmod +x "$STUB_DIR/bin/podman"
        echo "Setting up podman (4.3.1+ds1-8+deb12u1) ..."; exit 0
      fi
      echo "E: Unable to locate package podman"; exit 100;;
  esac
done
exit 0
"""

NVIDIA_SMI_STUB = "#!/bin/bash\necho 'NVIDIA H100 80GB HBM3, 81559'\n"


class VmRuntime:
    """What the VM image has and what its registry and apt mirror answer; set before running the script."""

    def __init__(self, tmp_path: Path):
        self.dir = tmp_path / "runtime"
        self.dir.mkdir(exist_ok=True)
        self.bin = tmp_path / "bin"
        (self.bin / "runtime.stub").write_text(RUNTIME_STUB.replace("$STUB_LOG", str(tmp_path / "calls.log"))
                                               .replace("$STUB_DIR", str(tmp_path)))
        for name in ("podman", "docker"):  # not on the image (and this machine's own, if any, out of reach)
            self._tool(name, "#!/bin/bash\necho \"$0: command not found\" >&2\nexit 127\n")
        self._tool("apt-get", APT_STUB.replace("$STUB_LOG", str(tmp_path / "calls.log"))
                   .replace("$STUB_DIR", str(tmp_path)))

    def _tool(self, name: str, text: str) -> None:
        (self.bin / name).write_text(text)
        (self.bin / name).chmod(0o755)

    def _flag(self, name: str, value: str = "") -> None:
        (self.dir / name).write_text(value)

    def installed(self, name: str) -> None:
        """The VM image ships `name` (podman or docker)."""
        self._tool(name, (self.bin / "runtime.stub").read_text())

    def mirror_has_podman(self, url: str) -> None:
        self._flag("apt_has_podman", url)

    def registry(self, *, plain_http: bool = False, auth: str | None = None) -> None:
        """auth: the `auth` value (base64 of user:password) the registry's credentials have in an auth file."""
        if plain_http:
            self._flag("plain_http")
        if auth:
            self._flag("needs_auth", auth)

    def image(self, *, python: bool = True, ray: str | None = None) -> None:
        if not python:
            self._flag("no_python")
        if ray:
            self._flag("ray", ray)

    def gpus(self) -> None:
        self._tool("nvidia-smi", NVIDIA_SMI_STUB)
