"""Planning inputs shared by the planner's tests: a synthetic workload profile, the local CPU offer, the real
catalog and a profile that fits most of it."""
import yaml

from infra.catalog import Offer, load_offers
from orchestrator.estimate.profile import OpCost, WorkloadProfile
from orchestrator.planning.spec import parse_job


def synthetic(flops=1e12, membytes=1e9, ops=50, steps=1000, state=1e9, act=1e9, family="conv", local=None):
    return WorkloadProfile(model="m", model_family=family, precision="fp32", batch_size=64, steps_per_epoch=steps,
                           epochs=1, params=int(state / 16), weight_bytes=state / 4, grad_bytes=state / 4,
                           optimizer_bytes=state / 2, activation_bytes=act, batch_input_bytes=1e6,
                           flops_per_step=flops, ops=[OpCost("mm", ops // 2, flops, 0.0),
                                                      OpCost("relu", ops - ops // 2, 0.0, membytes)],
                           local_step_seconds=local or {})


LOCAL_CPU = Offer(cloud="local", region="local", instance_type="cpu", accelerator=None, accelerator_count=0,
                  gpu_memory_gb=0.0, vcpus=2, memory_gb=8.0, price_per_hour=0.0, spot_price_per_hour=None)

CATALOG = load_offers()
PROFILE = synthetic(flops=3e12, membytes=2e9, ops=300, steps=3000, state=6e9, act=5e9, local={"cpu": 2.0})
REF = {"reference": {"accelerator": "T4", "hours": 1.0}}


def spec(**fields):
    """A cnn job with a T4 reference and these fields."""
    return parse_job(yaml.safe_dump({"name": "t", "job": "cnn", **REF, **fields}))
