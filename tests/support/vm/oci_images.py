"""The lab registry's images: real OCI images made from Debian roots, written into a registry's storage, cached.

What they stand for: the images a job names in `image:` (docker.io/library/python, a team's own image on
ghcr.io or a private registry), which podman on a VM pulls and runs. Each is real content (OCI image-spec
v1.1: a gzip tar layer whose sha256 is the manifest's digest and whose uncompressed sha256 is the config's
diff_id, an image config, a manifest; tags and digests as a registry serves them), so `podman pull`
verifies and unpacks them as it would any image:
- dlrun-lab/python:bookworm: the lab's stock Debian 12 root (rootfs.py: python3 3.11 without pip or venv,
  no Ray, no torch, sshd, curl) as one layer; linux/amd64. Stands for an image with Python but no Ray.
- dlrun-lab/nopython:bookworm: a bare Debian 12 (`mmdebstrap --variant=minbase`, as debian:bookworm-slim
  is: Essential + required + apt), no python3 at all; linux/amd64.
- dlrun-lab/arm64only:bookworm: an OCI index with one entry, linux/arm64, as a team that builds on a Mac
  pushes; on this amd64 lab podman refuses it ("no image found in manifest list for architecture amd64").
  Its layer is a placeholder, not an arm64 root: one text file saying so (nothing on amd64 gets to it).
- private/python:bookworm: the python image on the private registry (registry.py: behind basic auth).
- dlrun-lab/ray-torch:bookworm: a team's training image, as one built `FROM python` + `RUN pip install` (or a
  pytorch/pytorch image with Ray added): Ray's image_uri docs require the cluster's Ray and Python version in
  the image, so it holds ray[default,train] at the client's Ray, torch's CPU wheel at the client's torch,
  numpy and scikit-learn with their dependencies, for the image's CPython 3.11. Two layers: the python
  image's layer (the same blob) and a layer of the packages in /usr/local/lib/python3.11/dist-packages
  (where Debian's python3 finds pip's installs outside apt), installed by this machine's pip from the wheels
  the lab's package index caches (package_index.py: exactly that set, cp311 manylinux x86_64), their console
  scripts in /usr/local/bin (`#!/usr/bin/python3`, as pip writes them there), and /usr/local/bin/python, a link
  to python3, as the python images have (python:3.11's Dockerfile: "make some useful symlinks that are
  expected to exist", python -> python3; Ray's image_uri runs `python` in the image). No __pycache__ (a
  `pip install --no-compile`; Python writes them at first import, as in an image built so).
Each tag names an image manifest (what `podman push` of a local image writes), but the arm64 one's, an index.
What they do not reproduce: Docker Hub's multi-platform indexes for every image (the python and nopython
tags name a single amd64 manifest), image signatures, attestations, zstd layers, CUDA builds of torch (the
lab has no GPU), pip's own files in the images (no pip in ray-torch either: the image's python3 has none).

Storage: the registry's filesystem driver layout (distribution/distribution registry/storage/paths.go):
docker/registry/v2/blobs/sha256/<2>/<hex>/data; repositories/<name>/_layers/sha256/<hex>/link (layers
and config), _manifests/revisions/sha256/<hex>/link, _manifests/tags/<tag>/current/link and
.../index/sha256/<hex>/link, each link holding "sha256:<hex>". Two trees, public/ and private/, served by
one docker-registry each, read-only (registry.py). Cache: <rootfs.cache_dir()>/registry/<key>/, built once
under a flock (the stock root's layer ~4 s, the minbase root ~20 s with mmdebstrap, ray-torch's packages
layer ~55 s: pip ~25 s, then 1.47 GB of files gzipped at level 1 to 489 MB in ~30 s, where level 6 makes
429 MB in ~95 s; all of it 85-115 s on 2 shared cores, here). The packages layer is reproducible (sorted,
root-owned, one mtime): a rebuild gives the same digest. Without __pycache__ each container compiles what
it imports anew, into its own layer; compiled (pip's default) the layer would be 300 MB more, 106 MB gzipped.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zlib
from pathlib import Path

from .rootfs import MIRROR, SUITE, cache_dir, key_of, locked, stock_inputs, stock_root

RECIPE = 2  # 2: ray-torch's /usr/local/bin/python
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MINBASE_HOOK = 'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin'  # as Debian's official images
# name:tag -> (storage tree, what it is)
IMAGES = {"dlrun-lab/python:bookworm": "public", "dlrun-lab/nopython:bookworm": "public",
          "dlrun-lab/arm64only:bookworm": "public", "private/python:bookworm": "private",
          "dlrun-lab/ray-torch:bookworm": "public"}
# an image's kind (its repository's last part) -> its layers, bottom first
LAYERS = {"python": ("python",), "nopython": ("nopython",), "arm64only": ("arm64",),
          "ray-torch": ("python", "ray-torch")}
RAY_TORCH_PROJECTS = ("ray", "torch", "scikit-learn", "numpy")  # of package_index.requirements()
SITE_DIR = "usr/local/lib/python3.11/dist-packages"  # Debian's python3: pip's installs outside apt
PACKAGES_GZIP = 1  # gzip level of the packages layer: 6 saves ~12% for 3x the build time (see above)
EPOCH = 1767225600  # 2026-01-01: every file's mtime in a layer this module writes (a reproducible digest)
PLACEHOLDER = (b"dlrun's VM lab: a placeholder layer of an arm64-only image (tests/support/vm/oci_images.py).\n"
               b"The lab is amd64: podman refuses the image before it would unpack this.\n")
BUILD_TIMEOUT_S = 600

build_log: list[dict] = []  # what this process built (seconds): for the bench and reports


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _json(doc: dict) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


class _Blobs:
    """A registry storage tree being written: blobs plus each repository's links."""

    def __init__(self, root: Path):
        self.v2 = root / "docker" / "registry" / "v2"

    def blob_path(self, digest: str) -> Path:
        hexa = digest.split(":", 1)[1]
        return self.v2 / "blobs" / "sha256" / hexa[:2] / hexa / "data"

    def put(self, data: bytes) -> str:
        digest = _digest(data)
        path = self.blob_path(digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return digest

    def adopt(self, digest: str, source: Path) -> None:
        """A blob already written elsewhere (same file system): hard-linked in."""
        path = self.blob_path(digest)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            os.link(source, path)

    def _link(self, path: Path, digest: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(digest)

    def link_layer(self, repo: str, digest: str) -> None:
        self._link(self.v2 / "repositories" / repo / "_layers" / "sha256" / digest.split(":")[1] / "link", digest)

    def link_manifest(self, repo: str, digest: str, tag: str | None = None) -> None:
        manifests = self.v2 / "repositories" / repo / "_manifests"
        self._link(manifests / "revisions" / "sha256" / digest.split(":")[1] / "link", digest)
        if tag is not None:
            self._link(manifests / "tags" / tag / "current" / "link", digest)
            self._link(manifests / "tags" / tag / "index" / "sha256" / digest.split(":")[1] / "link", digest)


def gzip_layer(tar_argv: list[str], dest: Path, level: int = 1) -> tuple[str, str, int]:
    """Runs `tar_argv` (a tar on stdout) and writes it gzip-compressed to `dest`: (digest, diff_id, size)."""
    raw, packed = hashlib.sha256(), hashlib.sha256()
    compressor = zlib.compressobj(level, zlib.DEFLATED, 31)  # gzip format (level 1: fast)
    proc = subprocess.Popen(tar_argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    with open(dest, "wb") as out:
        while chunk := proc.stdout.read(1 << 20):
            raw.update(chunk)
            data = compressor.compress(chunk)
            packed.update(data)
            out.write(data)
        data = compressor.flush()
        packed.update(data)
        out.write(data)
    _, err = proc.communicate(timeout=BUILD_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"{tar_argv[0]} failed ({proc.returncode}): {err.decode(errors='replace')[-2000:]}")
    return "sha256:" + packed.hexdigest(), "sha256:" + raw.hexdigest(), dest.stat().st_size


def _image(blobs: _Blobs, layers: list[tuple[str, str, int]], arch: str,
           created_by: list[str]) -> tuple[str, int]:
    """Config + manifest for `layers` (bottom first, already in `blobs`; one history line each):
    (manifest digest, size)."""
    config = _json({"architecture": arch, "os": "linux", "created": "2026-01-01T00:00:00Z",
                    "config": {"Env": [PATH_ENV], "Cmd": ["bash"]},
                    "rootfs": {"type": "layers", "diff_ids": [diff_id for _, diff_id, _ in layers]},
                    "history": [{"created": "2026-01-01T00:00:00Z", "created_by": line} for line in created_by]})
    manifest = _json({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                      "config": {"mediaType": OCI_CONFIG, "digest": blobs.put(config), "size": len(config)},
                      "layers": [{"mediaType": OCI_LAYER, "digest": digest, "size": size}
                                 for digest, _, size in layers]})
    return blobs.put(manifest), len(manifest)


def ray_torch_requirements() -> list[str]:
    """What ray-torch's second layer installs: the lab index's pins of RAY_TORCH_PROJECTS (the client's Ray
    and torch versions)."""
    from .package_index import requirements

    return [r for r in requirements() if re.split(r"[\[=<>]", r, maxsplit=1)[0] in RAY_TORCH_PROJECTS]


def packages_layer(work: Path, dest: Path) -> tuple[str, str, int]:
    """ray-torch's second layer: `pip install` of ray_torch_requirements() for the image's CPython 3.11 from
    the lab index's wheels (nothing else: --no-index, this machine's pip configuration ignored), into
    SITE_DIR of an empty root under `work`, its console scripts moved to /usr/local/bin; gzipped to `dest`."""
    from .package_index import PLATFORMS, PYTHON_VERSION, wheel_dir

    site = work / SITE_DIR
    site.mkdir(parents=True)
    argv = [sys.executable, "-m", "pip", "install", "--isolated", "-q", "--disable-pip-version-check",
            "--no-index", "--find-links", str(wheel_dir()), "--only-binary=:all:", "--no-compile",
            "--python-version", PYTHON_VERSION, "--implementation", "cp",
            "--abi", "cp" + PYTHON_VERSION.replace(".", ""), "--target", str(site)]
    for platform in PLATFORMS:
        argv += ["--platform", platform]
    proc = subprocess.run(argv + ray_torch_requirements(), capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"pip install for the ray-torch image failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    scripts = work / "usr" / "local" / "bin"
    scripts.mkdir()
    for script in sorted((site / "bin").iterdir()):  # --target puts them beside the packages, for this python
        text = script.read_bytes()
        if text.startswith(b"#!"):
            text = b"#!/usr/bin/python3" + text[text.index(b"\n"):]
        (scripts / script.name).write_bytes(text)
        (scripts / script.name).chmod(0o755)
    shutil.rmtree(site / "bin")
    (scripts / "python").symlink_to("/usr/bin/python3")  # `python`, as python images have it (see the docstring)
    for directory in (scripts, *site.relative_to(work).parents):  # (ours, not pip's: whatever the umask)
        (work / directory).chmod(0o755)
    return gzip_layer(["tar", "-C", str(work), "--numeric-owner", "--owner=0", "--group=0", "--sort=name",
                       f"--mtime=@{EPOCH}", "-cf", "-", "usr"], dest, PACKAGES_GZIP)


def registry_inputs() -> dict:
    return {"images": IMAGES, "stock": key_of(stock_inputs()), "suite": SUITE, "mirror": MIRROR,
            "minbase_hook": MINBASE_HOOK, "recipe": RECIPE, "ray_torch": ray_torch_requirements(),
            "packages_gzip": PACKAGES_GZIP}


def storage_dir() -> Path:
    """The registries' storage (public/ and private/ trees), built now if the cache lacks it."""
    inputs = registry_inputs()
    home = cache_dir() / "registry"
    target = home / key_of(inputs)
    if (target / "images.json").exists():
        return target
    root = stock_root()  # (its own lock, taken before ours)
    with locked(home / ".lock"):
        if (target / "images.json").exists():
            return target
        shutil.rmtree(target, ignore_errors=True)
        tmp = home / f".building-{target.name}"
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "layers").mkdir(parents=True)
        started = time.monotonic()
        layers = {
            "python": gzip_layer(["tar", "-C", str(root), "--numeric-owner", "--sort=name", "--exclude=./dev/*",
                                  "-cf", "-", "."], tmp / "layers" / "python.tar.gz"),
            "nopython": gzip_layer(["mmdebstrap", "--quiet", "--variant=minbase", "--format=tar",
                                    f"--customize-hook={MINBASE_HOOK}", SUITE, "-", MIRROR],
                                   tmp / "layers" / "nopython.tar.gz"),
        }
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            info = tarfile.TarInfo("README.dlrun-lab")
            info.size, info.mtime = len(PLACEHOLDER), 1767225600
            tar.addfile(info, io.BytesIO(PLACEHOLDER))
        placeholder = tmp / "layers" / "arm64-placeholder.tar.gz"
        placeholder.write_bytes(_gzip(buf.getvalue()))
        layers["arm64"] = (_digest(placeholder.read_bytes()), _digest(buf.getvalue()), placeholder.stat().st_size)
        layers["ray-torch"] = packages_layer(tmp / "ray-torch-root", tmp / "layers" / "ray-torch.tar.gz")
        shutil.rmtree(tmp / "ray-torch-root")
        files = {"python": "python.tar.gz", "nopython": "nopython.tar.gz", "arm64": "arm64-placeholder.tar.gz",
                 "ray-torch": "ray-torch.tar.gz"}
        history = {key: f"dlrun VM lab: {kind} root ({SUITE})"
                   for key, kind in (("python", "python"), ("nopython", "nopython"), ("arm64", "arm64only"))}
        history["ray-torch"] = "RUN pip install " + " ".join(ray_torch_requirements())
        made = {}
        for tree in ("public", "private"):
            blobs = _Blobs(tmp / tree)
            for name, tree_of in IMAGES.items():
                if tree_of != tree:
                    continue
                repo, tag = name.split(":")
                kind = repo.split("/")[1]
                for key in LAYERS[kind]:
                    blobs.adopt(layers[key][0], tmp / "layers" / files[key])
                    blobs.link_layer(repo, layers[key][0])
                arch = "arm64" if kind == "arm64only" else "amd64"
                digest, size = _image(blobs, [layers[key] for key in LAYERS[kind]], arch,
                                      [history[key] for key in LAYERS[kind]])
                config = json.loads(blobs.blob_path(digest).read_bytes())["config"]["digest"]
                blobs.link_layer(repo, config)  # (the registry serves a config through the repository's layer links)
                if kind == "arm64only":
                    blobs.link_manifest(repo, digest)
                    index = _json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
                        {"mediaType": OCI_MANIFEST, "digest": digest, "size": size,
                         "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"}}]})
                    digest = blobs.put(index)
                blobs.link_manifest(repo, digest, tag)
                made[name] = {"digest": digest, "layers": [layers[key][0] for key in LAYERS[kind]],
                              "layer_bytes": sum(layers[key][2] for key in LAYERS[kind])}
        shutil.rmtree(tmp / "layers")  # (the trees hold the blobs: hard links)
        seconds = time.monotonic() - started
        (tmp / "images.json").write_text(json.dumps({"inputs": inputs, "seconds": round(seconds, 1),
                                                     "images": made}, indent=1))
        tmp.rename(target)
        build_log.append({"seconds": seconds, "path": str(target),
                          "bytes": sum(layer[2] for layer in layers.values())})
        return target


def _gzip(data: bytes) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    return compressor.compress(data) + compressor.flush()


def images() -> dict[str, dict]:
    """name:tag -> {"digest": the tag's manifest (or index) digest, "layers": their digests (bottom first),
    "layer_bytes": their compressed sizes summed}."""
    return json.loads((storage_dir() / "images.json").read_text())["images"]
