"""Stand-ins for a cloud image's `python3` and for uv that record their calls, and `node`: a start-up script
(infra/vm/bootstrap.py) run for real by bash as cloud-init runs it (no HOME, `env -i` with only a PATH, cwd /).

The `python3` stand-in: `python3 -c ...` (the version check) succeeds, `python3 - INDEX DEST ...` (the uv
fetch, get_uv.py on stdin) puts the uv stand-in at DEST/uv or prints a reason and fails when told to, and
`python -m ray.scripts.scripts start ...` fails as often as a test says (a worker joining before the head is
up). The uv stand-in: `uv --version` answers the pinned version, `uv venv ... DIR` makes DIR/bin/python
(the python3 stand-in), `uv pip install ...` succeeds unless told to fail, then with uv's own words for a
package the index lacks. What they do not reproduce: downloads, hashes, resolution (the real install phase
runs in a real stock Debian root in tests/integration/test_boot_stock_image.py).
"""
from __future__ import annotations

import shlex
import subprocess

import pytest

from infra.vm.bootstrap import UV_VERSION

STUB = r"""#!/bin/bash
echo "python $* [auth=${RAY_AUTH_MODE:-none} token=$(cat "${RAY_AUTH_TOKEN_PATH:-/dev/null}" 2>/dev/null)]" >> "$STUB_LOG"
if [ "$1" = "-" ]; then
  cat > /dev/null
  if [ -e "$STUB_DIR/uv_fails" ]; then cat "$STUB_DIR/uv_fails"; exit 1; fi
  mkdir -p "$3" && cp "$STUB_DIR/bin/uv.stub" "$3/uv" && chmod +x "$3/uv"; exit 0
fi
if [ "$1" = "-c" ] && [ -e "$STUB_DIR/old_python" ]; then  # the image's python3 is 3.8
  case "$2" in *print*) echo 3.8; exit 0;; *version_info*) exit 1;; esac
fi
if [ "$1 $2 $3" = "-m ray.scripts.scripts start" ] && [ -e "$STUB_DIR/fails" ]; then
  left=$(cat "$STUB_DIR/fails")
  if [ "$left" -gt 0 ]; then echo $((left - 1)) > "$STUB_DIR/fails"; exit 1; fi
fi
"""


UV_STUB = r"""#!/bin/bash
{ printf 'uv'; printf ' %q' "$@"; echo " [index=${UV_DEFAULT_INDEX:-}]"; } >> "$STUB_LOG"  # arguments as bash quotes them
case "$1" in
  --version) echo "uv $UV_VERSION (stub)";;
  venv) dir="${!#}"; mkdir -p "$dir/bin" && cp "$STUB_DIR/bin/python3" "$dir/bin/python";;
  pip)
    if [ -e "$STUB_DIR/pip_fails" ]; then
      echo "  x No solution found when resolving dependencies:"
      echo "  '-> Because $(cat "$STUB_DIR/pip_fails") was not found in the package registry and you require it, we can conclude that your requirements are unsatisfiable."
      exit 1
    fi;;
esac
exit 0
"""


def stub(text: str, tmp_path) -> str:
    return (text.replace("$STUB_LOG", str(tmp_path / "calls.log")).replace("$STUB_DIR", str(tmp_path))
            .replace("$UV_VERSION", UV_VERSION))


def uv_calls(calls: list[str], what: str = "pip install") -> list[list[str]]:
    """The uv commands of a run (arguments split, the recorded environment dropped)."""
    return [shlex.split(c.split(" [index=")[0]) for c in calls if c.startswith(f"uv {what}")]


NODE_DIR_ANCHOR = '"${DLRUN_NODE_DIR:-/var/lib/dlrun}"'  # where infra/vm/bootstrap.py's script keeps the node's files


def node_dir_in(script: str, node_dir) -> str:
    """The start-up script with its node directory moved to `node_dir`; fails the test, loudly, when the script no
    longer names it as NODE_DIR_ANCHOR: a replacement that did nothing would let a root test write to the host's
    /var/lib/dlrun."""
    if NODE_DIR_ANCHOR not in script:
        pytest.fail(f"the start-up script no longer names its node directory as {NODE_DIR_ANCHOR} "
                    "(infra/vm/bootstrap.py changed it): update tests/support/boot_stubs.py NODE_DIR_ANCHOR "
                    "so the test runs in its own directory, not the host's /var/lib/dlrun", pytrace=False)
    return script.replace(NODE_DIR_ANCHOR, shlex.quote(str(node_dir)))


@pytest.fixture
def node(tmp_path):
    """Run a start-up script under `env -i`; returns (returncode, calls, node dir, output)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python3", "sleep"):
        (bin_dir / name).write_text(stub(STUB, tmp_path))
        (bin_dir / name).chmod(0o755)
    (bin_dir / "uv.stub").write_text(stub(UV_STUB, tmp_path))
    # the watchdog would power the machine off: here `setsid` only records how it was started
    (bin_dir / "setsid").write_text(f'#!/bin/bash\necho "setsid $*" >> {tmp_path / "calls.log"}\n')
    (bin_dir / "setsid").chmod(0o755)
    # the image's user database: the login user's home is a test directory
    home = tmp_path / "home"
    home.mkdir()
    (bin_dir / "getent").write_text(f'#!/bin/bash\n[ "$2" = ubuntu ] && echo "ubuntu:x:1000:1000::{home}:/bin/bash"\n')
    (bin_dir / "getent").chmod(0o755)

    def run(script: str, ray_failures: int = 0, pip_fails: str | None = None, token: str | None = "s3cret-token",
            uv_fails: str | None = None):
        if token is not None:
            (home / ".dlrun-ray-token").write_text(token)  # what dlrun hands over through SSH
        if ray_failures:
            (tmp_path / "fails").write_text(str(ray_failures))
        for name, value in (("pip_fails", pip_fails), ("uv_fails", uv_fails)):
            if value is not None:
                (tmp_path / name).write_text(value)
            else:
                (tmp_path / name).unlink(missing_ok=True)
        script = node_dir_in(script, tmp_path / "node")
        path = tmp_path / "boot.sh"
        path.write_text(script)
        proc = subprocess.run(["env", "-i", f"PATH={bin_dir}:/usr/bin:/bin", "bash", str(path)], cwd="/",
                              capture_output=True, text=True, timeout=30)
        log = tmp_path / "calls.log"
        calls = log.read_text().splitlines() if log.exists() else []
        return proc.returncode, calls, tmp_path / "node", proc.stdout + proc.stderr

    return run
