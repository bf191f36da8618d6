"""Seeds moto with what AWS publishes for everyone: the public SSM parameters naming the current
Deep Learning Base OSS NVIDIA driver AMI and Canonical's Ubuntu AMI (moto refuses PutParameter under
/aws/, as AWS does, so they are written into its backend, in this process: mock_aws or ThreadedMotoServer)."""
from __future__ import annotations

from moto.core import DEFAULT_ACCOUNT_ID
from moto.core.utils import utcnow
from moto.ssm.models import Parameter, ssm_backends

from infra.software import image_for

# moto's own default AMIs: an Amazon-owned "Deep Learning AMI Ubuntu Linux" and a Canonical-owned Ubuntu
GPU_AMI = "ami-dca37ea5"
CPU_AMI = "ami-785db401"
REGIONS = ("us-east-1", "us-east-2", "us-west-2", "eu-west-1", "eu-west-2", "eu-central-1")


def seed_public_parameter(region: str, name: str, value: str, account: str = DEFAULT_ACCOUNT_ID) -> None:
    params = ssm_backends[account][region]._parameters
    params[name].append(Parameter(account_id=account, name=name, value=value, parameter_type="String",
                                  description=None, allowed_pattern=None, keyid=None,
                                  last_modified_date=utcnow(), version=len(params[name]) + 1,
                                  data_type="aws:ec2:image"))


def seed_image_parameters(regions=REGIONS, gpu_ami: str = GPU_AMI, cpu_ami: str = CPU_AMI) -> None:
    for region in regions:
        seed_public_parameter(region, image_for("aws", True).name, gpu_ami)
        seed_public_parameter(region, image_for("aws", False).name, cpu_ami)
