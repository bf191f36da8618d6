"""Which AMI a node boots, and the SSH user that image logs in with.

By default the AMI comes from the public SSM parameter the compatibility table names (configs/catalog/
images.csv): the Deep Learning Base OSS NVIDIA driver AMI for a GPU offer, Canonical's Ubuntu for a CPU
one, resolved per region at launch and accepted only from the account that publishes it. `image:` in the
job file overrides it: an AMI id, or a name pattern among the caller's own and Amazon's images, or
`ACCOUNT/pattern` for another account's.
"""
from __future__ import annotations

from infra.base import ProvisionError
from infra.software import image_for

_HOWTO = "set `image:` in the job file to an AMI id"


def _describe(ec2, **kw) -> list[dict]:
    found = ec2.describe_images(**kw)["Images"]
    return [i for i in found
            if i.get("Architecture", "x86_64") == "x86_64" and i.get("State", "available") == "available"]


def _user(image: dict) -> str:
    return "ubuntu" if "ubuntu" in image.get("Name", "").lower() else "ec2-user"


def _owned(image: dict, owner: str) -> bool:
    return image.get("OwnerId") == owner or (owner == "amazon" and image.get("ImageOwnerAlias") == "amazon")


def from_parameter(ec2, ssm, region: str, gpu: bool) -> tuple[str, str]:
    """(AMI id, SSH user) from the table's public SSM parameter for this kind of node."""
    row = image_for("aws", gpu)
    if row is None:
        raise ProvisionError(f"no AWS {'GPU' if gpu else 'CPU'} image in configs/catalog/images.csv; {_HOWTO}",
                             cloud="aws", region=region)
    try:
        ami = ssm.get_parameter(Name=row.name)["Parameter"]["Value"]
    except Exception as e:  # ParameterNotFound in this region, or no ssm:GetParameter right
        code = getattr(e, "response", {}).get("Error", {}).get("Code", type(e).__name__)
        raise ProvisionError(f"could not read the public SSM parameter {row.name} in {region} ({code}); {_HOWTO}",
                             cloud="aws", region=region) from None
    found = [i for i in _describe(ec2, ImageIds=[ami]) if _owned(i, row.owner)]
    if not found:
        raise ProvisionError(f"{row.name} in {region} names {ami}, which is not an available x86_64 image "
                             f"owned by {row.owner}; {_HOWTO}", cloud="aws", region=region)
    return ami, row.login_user or _user(found[0])


def find_image(ec2, region: str, image: str | None, *, ssm=None, gpu: bool = True) -> tuple[str, str]:
    """(AMI id, SSH user): the table's image for a GPU / CPU node, or the one the request names."""
    if not image:
        return from_parameter(ec2, ssm, region, gpu)
    if image.startswith("ami-"):
        found = _describe(ec2, ImageIds=[image])
    else:
        owner, _, pattern = image.partition("/")
        if not (owner.isdigit() and len(owner) == 12 or owner in ("amazon", "self")):
            owner, pattern = "", image  # a plain name pattern (AMI names may hold slashes)
        found = _describe(ec2, Owners=[owner] if owner else ["self", "amazon"],
                          Filters=[{"Name": "name", "Values": [pattern]}])
    if not found:
        raise ProvisionError(f"no AMI matching {image!r} in {region}; {_HOWTO}", cloud="aws", region=region)
    newest = max(found, key=lambda i: (i.get("CreationDate", ""), "ubuntu" in i.get("Name", "").lower()))
    return newest["ImageId"], _user(newest)


# The root volume's floor when the plan asks for less (BootstrapConfig.root_volume_gb = 0 or small). Canonical's
# Ubuntu AMIs come with 8 GiB (notes/real-cloud-audit.md): a venv with Ray, torch's CPU wheel and scikit-learn
# takes ~2.5 GB, pip's cache as much again, and the job's data and checkpoints come on top. 30 GiB of gp3 is
# $2.40 a month ($0.0033/h, under 4% of a c7i.large). A GPU node adds torch's CUDA wheels (~3 GB, plus ~4 GB
# of nvidia-* wheels) to a deep-learning image that already fills most of its own snapshot: 100 GiB, as GCP's
# GPU boot disks (gp3 $8 a month, $0.011/h: 2% of a g4dn.xlarge). Prices: aws.amazon.com/ebs/pricing (us-east-1).
ROOT_FLOOR_GB = {False: 30, True: 100}
ROOT_VOLUME_TYPE = "gp3"


def root_volume(ec2, ami: str, requested_gb: int, *, gpu: bool) -> dict:
    """The BlockDeviceMapping for the image's root device: max(plan, floor, the image's own snapshot) GiB
    of gp3, deleted with the instance. EC2 refuses a root volume smaller than the image's snapshot
    (InvalidBlockDeviceMapping), so the snapshot's size is a floor too."""
    (image,) = ec2.describe_images(ImageIds=[ami])["Images"]
    device = image.get("RootDeviceName") or "/dev/sda1"
    own = next((int(m.get("Ebs", {}).get("VolumeSize") or 0) for m in image.get("BlockDeviceMappings", [])
                if m.get("DeviceName") == device), 0)
    size = max(int(requested_gb or 0), ROOT_FLOOR_GB[gpu], own)
    return {"DeviceName": device, "Ebs": {"VolumeSize": size, "VolumeType": ROOT_VOLUME_TYPE,
                                          "DeleteOnTermination": True}}
