"""Fetches uv, the standalone Python package installer, onto a node: the boot script runs this file with the
image's own python3 (standard library only: no pip, no venv module, no apt), as

    python3 - INDEX DEST ARCH VERSION ARCH=WHEEL=SHA256 ...   < get_uv.py

INDEX is a PEP 503 package index (PyPI's https://pypi.org/simple or the user's mirror), DEST the directory
that gets the `uv` binary, ARCH the node's `uname -m`, VERSION the uv release dlrun pins and each
ARCH=WHEEL=SHA256 the wheel of that release for one architecture with its published sha256. The wheel is
looked up on INDEX's /uv/ page, downloaded, checked against the pinned sha256 (and the page's #sha256=
fragment when it has one: a mirror that serves another file is refused), and the binary is taken out of
it with zipfile. On failure it prints one line saying what is missing (the boot's failed marker) on
stdout and exits 1; progress goes to stderr (the boot log).
"""
import hashlib
import html.parser
import io
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile

ATTEMPTS = 4  # a network that is still coming up at first boot: 1 + 2 + 4 s between tries


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def _fetch(url: str) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": "text/html", "User-Agent": "dlrun-node-boot"})
    for attempt in range(ATTEMPTS):
        try:
            with urllib.request.urlopen(request, timeout=60) as resp:
                return resp.read()
        except urllib.error.HTTPError as e:
            if e.code < 500 or attempt == ATTEMPTS - 1:
                raise
        except (urllib.error.URLError, OSError):
            if attempt == ATTEMPTS - 1:
                raise
        time.sleep(2 ** attempt)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _reason(e):
    return str(getattr(e, "reason", "") or e)


def get_uv(index, dest, arch, version, pins):
    """None when DEST/uv is in place; else why not."""
    wheels = dict(p.split("=", 1) for p in pins)
    if arch not in wheels:
        return (f"no uv wheel for this machine's architecture {arch} (dlrun pins uv {version} for "
                f"{', '.join(sorted(wheels))})")
    name, want = wheels[arch].split("=", 1)
    page = index.rstrip("/") + "/uv/"
    try:
        body = _fetch(page)
    except urllib.error.HTTPError as e:
        return f"the package index {page} answered HTTP {e.code}: it has no uv (uv {version} is needed to boot)"
    except (urllib.error.URLError, OSError) as e:
        return f"package index unreachable: {page} ({_reason(e)})"
    links = _Links()
    links.feed(body.decode("utf-8", "replace"))
    href = next((h for h in links.hrefs
                 if urllib.parse.unquote(urllib.parse.urlsplit(h).path.rsplit("/", 1)[-1]) == name), None)
    if href is None:
        return f"no uv wheel for {arch} on the package index: {page} lists no {name} (uv {version})"
    url, _, fragment = urllib.parse.urljoin(page, href).partition("#")
    listed = fragment[len("sha256="):] if fragment.startswith("sha256=") else ""
    if listed and listed.lower() != want:
        return f"hash mismatch: {page} lists {name} with sha256 {listed}; dlrun pins {want}"
    try:
        data = _fetch(url)
    except (urllib.error.URLError, OSError) as e:
        return f"package index unreachable: could not download {url} ({_reason(e)})"
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        return f"hash mismatch: {url} has sha256 {got}; dlrun pins {want}"
    member = f"uv-{version}.data/scripts/uv"
    try:
        binary = zipfile.ZipFile(io.BytesIO(data)).read(member)
    except (zipfile.BadZipFile, KeyError) as e:
        return f"{name} holds no {member} ({e})"
    os.makedirs(dest, exist_ok=True)
    part = os.path.join(dest, "uv.part")
    with open(part, "wb") as f:
        f.write(binary)
    os.chmod(part, 0o755)
    os.replace(part, os.path.join(dest, "uv"))
    print(f"uv {version}: {url} ({len(data) / 1e6:.1f} MB, sha256 {got[:12]}... as pinned)", file=sys.stderr)
    return None


if __name__ == "__main__":
    if len(sys.argv) < 6:
        print("usage: python3 - INDEX DEST ARCH VERSION ARCH=WHEEL=SHA256 ... < get_uv.py")
        sys.exit(2)
    why = get_uv(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
    if why:
        print(why)
        sys.exit(1)
