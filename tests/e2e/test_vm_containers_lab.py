"""The lab's container path, without dlrun: a stock VM installs podman from the lab's Debian mirror (apt verifies
deb.debian.org's signature with the image's own keyring), pulls the lab registry's images over plain HTTP and runs
them, and meets what a real registry and mirror refuse: an image without python3, an arm64-only image on amd64, a
private image without credentials, a package the mirror lacks, a VM with no mirror at all. What dlrun's boot does
with these (infra/) is tested elsewhere; this checks that the lab gives it something real to meet."""
from __future__ import annotations

import pytest

from tests.support.vm.fixtures import vm_lab  # noqa: F401  (fixture)
from tests.support.vm.machine import VmSpec
from tests.support.vm.oci_images import images
from tests.support.vm.registry import registry_problem

APT = "apt-get -q -o Dir::Etc::SourceList=/etc/apt/lab.list -o Dir::Etc::SourceParts=/dev/null"


@pytest.fixture
def registry_ok():
    problem = registry_problem()
    if problem:
        pytest.skip(problem)


def _run(vm, command: str, timeout: float = 120):
    out = vm.run(command, timeout=timeout)
    return out.returncode, out.stdout + out.stderr


def test_podman_from_the_lab_mirror_runs_the_lab_registry_images(vm_lab, registry_ok):
    registry = vm_lab.registry
    vm = vm_lab.boot(VmSpec("containers-1", "10.99.3.2", None, "ubuntu", []))
    assert _run(vm, "command -v podman docker runc crun")[0] != 0  # a stock image has no container runtime

    # the mirror: deb.debian.org's InRelease, checked against the image's own keyring (no trusted=yes)
    mirror = vm_lab.mirrors["apt"]
    vm.run(f"echo 'deb [signed-by=/usr/share/keyrings/debian-archive-removed-keys.gpg] {mirror} bookworm main'"
           " > /etc/apt/lab.list", check=True)
    rc, out = _run(vm, f"{APT} update")
    assert rc == 100 and "NO_PUBKEY" in out and "is not signed" in out, out
    vm.run(f"echo 'deb {mirror} bookworm main' > /etc/apt/lab.list", check=True)
    rc, out = _run(vm, f"{APT} update")
    assert rc == 0 and "Err" not in out and "W:" not in out, out
    rc, out = _run(vm, f"DEBIAN_FRONTEND=noninteractive {APT} install -y --no-install-recommends podman", 300)
    assert rc == 0 and "Setting up podman (" in out, out[-3000:]
    # a package the index lists but this mirror's pool lacks: apt fails as on a partial mirror
    rc, out = _run(vm, f"DEBIAN_FRONTEND=noninteractive {APT} install -y cowsay")
    assert rc == 100 and "404  Not Found" in out and "pool/main/c/cowsay/cowsay_" in out, out

    # the registry is plain HTTP on the bridge: podman refuses it unless told it is insecure
    python = registry.image("dlrun-lab/python:bookworm")
    rc, out = _run(vm, f"podman pull -q {python}")
    assert rc != 0 and "server gave HTTP response to HTTPS client" in out, out
    rc, out = _run(vm, f"podman pull -q --tls-verify=false {python} && "
                       f"podman image inspect --format '{{{{.Digest}}}}' {python}")
    assert rc == 0 and out.split()[-1] == images()["dlrun-lab/python:bookworm"]["digest"], out
    index = vm_lab.mirrors["pypi"]
    script = (f"import sys, urllib.request as u; print(sys.version_info[:2], u.urlopen('{index}/uv/').status);"
              " import ray")
    rc, out = _run(vm, f'podman run --rm --network host {python} python3 -c "{script}"')
    assert rc == 1 and "(3, 11) 200" in out and "No module named 'ray'" in out, out

    nopython = registry.image("dlrun-lab/nopython:bookworm")
    rc, out = _run(vm, f"podman run --rm --tls-verify=false {nopython} python3 -V")
    assert rc == 127 and "executable file `python3` not found" in out, out
    rc, out = _run(vm, f"podman run --rm {nopython} sh -c 'cat /etc/debian_version; ls /usr/bin | grep -c python'")
    assert rc == 1 and out.startswith("12.") and out.split()[-1] == "0", out

    rc, out = _run(vm, f"podman pull --tls-verify=false {registry.image('dlrun-lab/arm64only:bookworm')}")
    assert rc == 125 and "no image found in image index for architecture amd64" in out, out

    private = registry.image("private/python:bookworm")
    rc, out = _run(vm, f"podman pull --tls-verify=false {private}")
    assert rc == 125 and "authentication required" in out, out
    rc, out = _run(vm, f"echo wrong | podman login --tls-verify=false -u {registry.username} --password-stdin "
                       f"{registry.private_host}")
    assert rc == 125 and "invalid username/password" in out, out
    vm.run(f"cat > /root/auth.json <<'EOF'\n{registry.auth_json()}\nEOF", check=True)
    rc, out = _run(vm, f"podman pull -q --tls-verify=false --authfile /root/auth.json {private} && "
                       f"podman run --rm {private} python3 -c 'print(6 * 7)'")
    assert rc == 0 and out.split()[-1] == "42", out
    rc, out = _run(vm, f"podman rmi {private} >/dev/null; echo {registry.password} | podman login --tls-verify=false "
                       f"-u {registry.username} --password-stdin {registry.private_host} && "
                       f"podman pull -q --tls-verify=false {private}")
    assert rc == 0 and "Login Succeeded" in out, out


def test_a_stock_vm_without_the_mirror_cannot_install_podman(vm_lab):
    """The image's own sources (deb.debian.org) are out of a lab VM's reach, and its package lists are empty."""
    vm = vm_lab.boot(VmSpec("containers-2", "10.99.3.3", None, "ubuntu", []))
    rc, out = _run(vm, "apt-get -q -o Acquire::Retries=0 update")  # (no retries: apt's backoff takes 7 s)
    assert "Could not resolve 'deb.debian.org'" in out or "Temporary failure resolving" in out, out
    rc, out = _run(vm, "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends podman")
    assert rc == 100 and "Unable to locate package podman" in out, out
