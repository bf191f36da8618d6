"""infra/gcp/images.py against the fake Compute Engine: each GPU generation boots the table's Deep Learning
VM family (its R580 driver runs the planned CUDA 12.6 / 13.0 wheels), a CPU offer plain Ubuntu."""
from __future__ import annotations

import pytest

from infra.software import software_plan
from tests.support.gcp_provider import (  # noqa: F401 (fixtures)
    boot_image, gce, no_address_lookup, offer, provider, request)

DLVM = "projects/deeplearning-platform-release/global/images/family/common-cu129-ubuntu-2204-nvidia-580"
UBUNTU = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts"


@pytest.mark.parametrize("instance_type,gpu,image,index", [
    ("n1-standard-8", "T4", DLVM, "cu130"), ("n1-standard-8", "V100", DLVM, "cu126"),
    ("n1-standard-8", "P100", DLVM, "cu126"), ("g2-standard-4", "L4", DLVM, "cu130"),
    ("a2-highgpu-1g", "A100", DLVM, "cu130"), ("e2-standard-2", None, UBUNTU, "cpu"),
])
def test_each_generation_boots_the_family_its_wheels_need(gce, provider, instance_type, gpu, image, index):
    provider.launch(request(the_offer=offer(instance_type, gpu, 1 if gpu else 0)))
    (inst,) = gce.instances.values()
    assert boot_image(gce, inst) == image
    plan = software_plan("gcp", gpu, "2.13.0", "torch==2.13.0")
    assert plan.image == image and plan.wheel_index == index


def test_image_in_the_job_file_wins(gce, provider):
    provider.launch(request(image="pytorch-2-9-cu129-ubuntu-2204-nvidia-580"))
    (inst,) = gce.instances.values()
    assert boot_image(gce, inst).endswith("/family/pytorch-2-9-cu129-ubuntu-2204-nvidia-580")
