"""Which image a GCE node boots: the compatibility table's Deep Learning VM family (its NVIDIA driver
runs the CUDA of the planned torch wheels) for a GPU offer, plain Ubuntu for a CPU one (configs/catalog/
images.csv); `image:` in the job file overrides it."""
from __future__ import annotations

from infra.base import ClusterRequest, ProvisionError
from infra.software import image_for as table_image

DLVM_FAMILY = "projects/deeplearning-platform-release/global/images/family/{}"


def image_for(request: ClusterRequest) -> str:
    """request.image as a full image path (projects/...), or as a Deep Learning VM family name."""
    if request.image:
        if request.image.startswith(("projects/", "https://")):
            return request.image
        return DLVM_FAMILY.format(request.image)
    row = table_image("gcp", bool(request.offer.accelerator))
    if row is None:
        raise ProvisionError("no GCP image in configs/catalog/images.csv; set `image:` in the job file",
                             cloud="gcp", region=request.offer.region)
    return row.name
