"""A stand-in `podman` executable, and the check whether a real container runtime works here.

The stand-in reproduces what dlrun asks of podman (podman-info(1), podman-image-inspect(1), podman-run(1)):
`info` exits 0; `image inspect REF` exits 0 only for the images it was told are in its store, 125 with
"image not known" otherwise; `run ... IMAGE CMD...` records its argv (one JSON line per call in
`calls.jsonl` beside it), refuses an image reference that is not fully qualified (podman's short-name
mode "enforcing" without a TTY), and runs CMD on the host as the container would, in `-w`'s directory with
only the `-e NAME` variables (values from its own environment, as podman takes them); a CMD that is not in
the "image" (the stand-in's `missing` list, e.g. python3) exits 127 as podman does ("executable file not
found in $PATH"). It does not isolate anything (no namespaces, mounts are not applied, `--pull` is not
performed), and does not pull.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

SCRIPT = r'''#!{python}
import json, os, subprocess, sys
HERE = os.path.dirname(os.path.abspath(__file__))
CONF = json.load(open(os.path.join(HERE, "conf.json")))
args = sys.argv[1:]
with open(os.path.join(HERE, "calls.jsonl"), "a") as f:
    f.write(json.dumps(args) + "\n")
if args[:1] == ["info"]:
    sys.exit(0)
if args[:2] == ["image", "inspect"]:
    if args[2] in CONF["images"]:
        print("[{{}}]"); sys.exit(0)
    print(f"Error: {{args[2]}}: image not known", file=sys.stderr); sys.exit(125)
if args[:1] != ["run"]:
    print("Error: unknown command", file=sys.stderr); sys.exit(125)
takes_value = {{"--network", "--ipc", "--pull", "--name", "--label", "--device", "--gpus", "--user", "-v", "-w", "-e"}}
i, workdir, names = 1, None, []
while i < len(args) and args[i].startswith("-"):
    if args[i] in takes_value:
        if args[i] == "-w": workdir = args[i + 1]
        if args[i] == "-e": names.append(args[i + 1])
        i += 2
    else:
        i += 1
image, cmd = args[i], args[i + 1:]
first = image.split("/")[0]
if "/" not in image or not ("." in first or ":" in first or first == "localhost"):
    print(f"Error: short-name resolution enforced but cannot prompt without a TTY: {{image}}", file=sys.stderr)
    sys.exit(125)
if cmd and cmd[0] in CONF["missing"]:
    print(f"Error: crun: executable file `{{cmd[0]}}` not found in $PATH", file=sys.stderr); sys.exit(127)
env = {{n: os.environ[n] for n in names if n in os.environ}}
env["PATH"] = os.environ.get("PATH", "")
sys.exit(subprocess.run(cmd, cwd=workdir, env=env).returncode)
'''


def fake_podman(directory: Path, *, images: tuple[str, ...] = (), missing: tuple[str, ...] = ()) -> Path:
    """A `podman` stand-in in `directory` (put it on PATH); its calls land in directory/calls.jsonl."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "conf.json").write_text(json.dumps({"images": list(images), "missing": list(missing)}))
    path = directory / "podman"
    path.write_text(SCRIPT.format(python=sys.executable))
    path.chmod(0o755)
    return path


def calls(directory: Path) -> list[list[str]]:
    f = directory / "calls.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []


def working_runtime() -> tuple[str | None, str]:
    """(podman or docker, if one runs containers here, else None; why not)."""
    problems = []
    for name in ("podman", "docker"):
        path = shutil.which(name)
        if not path:
            problems.append(f"{name} is not installed")
            continue
        proc = subprocess.run([path, "info"], capture_output=True, text=True, timeout=30)
        if proc.returncode == 0:
            return path, ""
        problems.append(f"`{name} info` fails")
    return None, "no container runtime works here (" + "; ".join(problems) + "): `apt-get install podman`"
