"""Wheels repacked from distributions installed in the test venv, for the VM image's offline wheelhouse.

Why: `python3 -m venv --system-site-packages` installs ensurepip's bundled pip and setuptools (65.5 on
3.11) into the new venv, where they shadow the image's newer ones; torch requires setuptools>=77.0.3, so
`pip install torch` in that venv needs a newer setuptools, which a VM with no index can only take from a
local wheelhouse (pip.conf find-links), as an offline image would ship it. Only pure-Python wheels
installed from wheels (they have a WHEEL file) can be repacked this way.
"""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import zipfile
from pathlib import Path

SKIP_IN_DIST_INFO = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def find_dist_info(site_packages: Path, name: str) -> Path | None:
    wanted = re.sub(r"[-_.]+", "_", name).lower()
    for dist in site_packages.glob("*.dist-info"):
        if re.sub(r"[-_.]+", "_", dist.name[: -len(".dist-info")].rsplit("-", 1)[0]).lower() == wanted:
            return dist
    return None


def repack(site_packages: Path, name: str, dest: Path) -> Path | None:
    """Writes `name` as installed in site_packages into dest as a py3-none-any wheel; None if it can't."""
    dist = find_dist_info(site_packages, name)
    if dist is None or not (dist / "WHEEL").is_file():
        return None
    if "Root-Is-Purelib: true" not in (dist / "WHEEL").read_text():
        return None
    files = []
    for row in csv.reader((dist / "RECORD").read_text().splitlines()):
        path = row[0] if row else ""
        if not path or path.startswith("..") or "__pycache__/" in path or path.endswith(".pyc"):
            continue
        if path.startswith(dist.name + "/") and path.split("/", 1)[1] in SKIP_IN_DIST_INFO:
            continue
        if (site_packages / path).is_file():
            files.append(path)
    project, version = dist.name[: -len(".dist-info")].rsplit("-", 1)
    wheel = dest / f"{re.sub(r'[-_.]+', '_', project)}-{version}-py3-none-any.whl"
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:
        for path in files:
            data = (site_packages / path).read_bytes()
            zf.writestr(path, data)
            writer.writerow([path, _hash(data), len(data)])
        writer.writerow([f"{dist.name}/RECORD", "", ""])
        zf.writestr(f"{dist.name}/RECORD", record.getvalue())
    return wheel


def build_wheelhouse(site_packages: Path, dest: Path, names=("pip", "setuptools", "wheel")) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    return [w for w in (repack(site_packages, n, dest) for n in names) if w is not None]
