"""Which AMI a node boots, and the SSH user that image logs in with."""
from __future__ import annotations

from infra.base import ProvisionError

# newest match wins; real DLAMIs are Ubuntu/Amazon Linux images published by Amazon
DEFAULT_AMI_NAME_PATTERNS = ("Deep Learning*",)


def find_image(ec2, region: str, image: str | None) -> tuple[str, str]:
    """(AMI id, SSH user): the newest deep-learning AMI, or the one the request names."""
    if image and image.startswith("ami-"):
        found = ec2.describe_images(ImageIds=[image])["Images"]
    else:
        found = ec2.describe_images(Owners=[] if image else ["amazon"], Filters=[
            {"Name": "name", "Values": [image] if image else list(DEFAULT_AMI_NAME_PATTERNS)},
            {"Name": "state", "Values": ["available"]},
        ])["Images"]
        found = [i for i in found if i.get("Architecture", "x86_64") == "x86_64"]
    if not found:
        raise ProvisionError(f"no AMI matching {image or DEFAULT_AMI_NAME_PATTERNS[0]!r} in {region}; "
                             "set `image:` to an AMI id", cloud="aws", region=region)
    newest = max(found, key=lambda i: (i.get("CreationDate", ""), "ubuntu" in i.get("Name", "").lower()))
    user = "ubuntu" if "ubuntu" in newest.get("Name", "").lower() else "ec2-user"
    return newest["ImageId"], user
