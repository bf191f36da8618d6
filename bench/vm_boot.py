"""Boot-to-ready of dlrun's own start-up script on each emulated-VM lab image, packages from the lab's index.

    sudo .venv/bin/python bench/vm_boot.py [--images stock,deep-learning] [--cold] [--container]

For each lab image (tests/support/vm/image.py) a VM boots a head node's script as dlrun writes it for a CPU
offer (infra/vm/bootstrap.py: uv from the PyPI mirror, a venv, torch from the torch mirror, Ray and the
rest from the PyPI mirror, then `ray start --head`), with the lab's mirrors as a user's config.yaml would
give them. The Ray token is handed over as dlrun does (a file in the login user's home) as soon as the VM
is up, so the time measured is the boot's own: from the VM's start to the `ready` marker
($NODE_DIR/ready, then "dlrun boot done" on the console). Goal: <= 90 s for the stock image here.
Also printed: the one-time costs (Debian image build, wheel download: as recorded when the cache was
made, or measured now with --cold, which uses a fresh cache directory and no pip cache).
--container also boots the stock image with a job's `image:` (the lab registry's dlrun-lab/python:bookworm:
podman from the lab's apt mirror, the pull, dlrun's Ray into a venv of the image's python3, Ray in the
container; infra/vm/container_boot.py) and prints the pull's share of that start-up.
Needs root (the lab). The machine's load is printed with the numbers: they are wall-clock seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

GOAL_S = {"stock": 90.0}


def one_time_costs(cold: bool) -> list[str]:
    from tests.support.vm import package_index, rootfs

    lines = []
    if cold:
        os.environ["DLRUN_LAB_CACHE"] = tempfile.mkdtemp(prefix="dlrun-lab-cold-")
        os.environ["PIP_NO_CACHE_DIR"] = "1"
    root = rootfs.stock_root()
    build = json.loads((root.parent / "build.json").read_text())
    wheels = package_index.wheel_dir()
    index = json.loads((wheels / "index.json").read_text())
    how = "measured now (fresh cache, no pip cache)" if cold else "recorded when the cache was made"
    lines.append(f"image build (mmdebstrap, stock Debian 12 root): {build['seconds']:.1f} s, {how}")
    mb = index["bytes"] / 1e6
    lines.append(f"wheel download: {len(index['files'])} files, {mb:.0f} MB in {index['seconds']:.1f} s "
                 f"({mb / max(index['seconds'], 1e-9):.0f} MB/s), {how}")
    return lines


def boot_to_ready(lab, name: str, ip: str, timeout_s: float = 900, container: str = "") -> dict:
    from importlib.metadata import version

    from infra.base import BootstrapConfig
    from infra.buckets import node_client_packages
    from infra.vm.bootstrap import TOKEN_FILE, startup_script
    from tests.support.vm.machine import VmSpec

    torch = version("torch").split("+")[0]
    cfg = BootstrapConfig(ray_version=version("ray"), python_packages=node_client_packages("s3://"),
                          torch_requirement=f"torch=={torch}", torch_index_url=lab.mirrors["torch"] + "/cpu",
                          pip_index_url=lab.mirrors["pypi"], container_image=container, container_insecure=True,
                          apt_mirror=lab.mirrors["apt"])
    script = startup_script(cfg, is_head=True, cluster_id=f"bench-{name}", login_user="ubuntu")
    started = time.monotonic()
    vm = lab.boot(VmSpec(f"bench-{name}", ip, None, "ubuntu", [], boot_script=script.encode(), cloud_image=name))
    booted = time.monotonic() - started
    vm.run(f"umask 077; echo {'0123456789abcdef' * 4} > /home/ubuntu/{TOKEN_FILE}; "
           f"chown ubuntu: /home/ubuntu/{TOKEN_FILE}", check=True)
    marks: dict[str, float] = {}
    while time.monotonic() - started < timeout_s:
        console = vm.console_log()
        for mark, text in (("uv fetched", "fetching uv"), ("podman installed", "container runtime: "),
                           ("packages installed", "waiting for the cluster's Ray token"),
                           ("image pulled", "pulled "), ("ready", "dlrun boot done"), ("failed", "dlrun boot failed")):
            if mark not in marks and text in console:
                marks[mark] = time.monotonic() - started
        if "ready" in marks or "failed" in marks:
            break
        time.sleep(0.2)
    du = vm.run("du -s --block-size=1M /var/lib/dlrun 2>/dev/null | cut -f1").stdout.strip()  # (not -x: overlay)
    failed = re.findall(r"dlrun boot failed: .*", vm.console_log())
    pull = re.findall(r"pulled \S+ in (\d+) ms", vm.console_log())
    lab.kill(vm.instance_id)
    return {"image": name, "vm_up_s": booted, "marks": marks, "node_dir_mb": du, "failed": failed[:1],
            "pull_s": int(pull[0]) / 1000 if pull else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", default="stock,deep-learning")
    ap.add_argument("--cold", action="store_true", help="measure the image build and wheel download from scratch")
    ap.add_argument("--container", action="store_true", help="also a stock VM running a job's image")
    args = ap.parse_args()
    os.environ.setdefault("DLRUN_HOME", tempfile.mkdtemp(prefix="dlrun-bench-"))
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from tests.support.vm.fixtures import vm_support_problem
    from tests.support.vm.lab import VmLab

    problem = vm_support_problem()
    if problem:
        print(f"vm_boot: skipped: {problem}")
        return
    for line in one_time_costs(args.cold):
        print(line)
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")
    with VmLab() as lab:
        for i, name in enumerate(args.images.split(",")):
            r = boot_to_ready(lab, name, f"10.77.{os.getpid() % 250}.{10 + i}")
            marks = ", ".join(f"{k} {v:.1f} s" for k, v in r["marks"].items())
            end = r["marks"].get("ready")
            verdict = ""
            if name in GOAL_S and end is not None:
                verdict = f" (goal <= {GOAL_S[name]:.0f} s: {'met' if end <= GOAL_S[name] else 'missed'})"
            print(f"{name}: VM up {r['vm_up_s']:.2f} s; {marks}{verdict}; /var/lib/dlrun {r['node_dir_mb']} MB"
                  + (f"; {r['failed'][0]}" if r["failed"] else ""))
        if args.container:
            image = lab.registry.image("dlrun-lab/python:bookworm")
            r = boot_to_ready(lab, "stock", f"10.77.{os.getpid() % 250}.99", container=image)
            marks = ", ".join(f"{k} {v:.1f} s" for k, v in r["marks"].items())
            end, pull = r["marks"].get("ready"), r["pull_s"]
            share = f"; the pull {pull:.1f} s = {pull / end:.0%} of the start-up" if end and pull else ""
            print(f"stock + image {image}: VM up {r['vm_up_s']:.2f} s; {marks}{share}"
                  + (f"; {r['failed'][0]}" if r["failed"] else ""))
        served = sum(1 for line in lab.index.requests if " /files/" in line and line.endswith(" 200"))
        print(f"index: {served} files served")
    load = os.getloadavg()
    print(f"load average after: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")


if __name__ == "__main__":
    main()
