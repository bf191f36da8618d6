"""Which image a GCE node boots."""
from __future__ import annotations

from infra.base import ClusterRequest

# Deep Learning VM images (CUDA 12.8, NVIDIA driver 570 preinstalled); request.image overrides
GPU_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cu128-ubuntu-2204-nvidia-570"
CPU_IMAGE = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts"


def image_for(request: ClusterRequest) -> str:
    """request.image as a full image path (projects/...), or as a Deep Learning VM family name."""
    if request.image:
        if request.image.startswith(("projects/", "https://")):
            return request.image
        return f"projects/deeplearning-platform-release/global/images/family/{request.image}"
    return GPU_IMAGE if request.offer.accelerator else CPU_IMAGE
