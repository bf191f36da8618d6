"""The Compute Engine instance dlrun asks for: machine type, GPUs, scheduling, image, labels, metadata.

GPU rules of the real API: N1 machine types take GPUs as `guestAccelerators` (type URL in the same
zone); accelerator-optimized families (a2, a3, g2) come with their GPUs and must not list them; any
VM with a GPU cannot live-migrate, so `onHostMaintenance` is TERMINATE.

Hard ceiling: when the job has a deadline, every instance (on-demand or spot) carries
`scheduling.maxRunDuration` with `instanceTerminationAction: DELETE`, so GCE itself deletes it even if
the node's own watchdog (infra/vm/watchdog.sh, at max_run_s) never runs. GCE allows 30 s to 120 days
(cloud.google.com/compute/docs/instances/limit-vm-runtime, "Limitations").
"""
from __future__ import annotations

import re

from google.cloud import compute_v1

from infra.gcp.images import image_for
from infra.gcp.storage import NODE_SCOPES
from infra.base import TAG_CLUSTER, TAG_JOB, TAG_OWNER, ClusterRequest, ProvisionError
from infra.identity import owner_identity
from infra.gcp.network import SSH_USER, cluster_tag, network_link, slug, subnetwork_link
from infra.catalog import gpu_spec

# zones dlrun tries, in order, per region (GPU zones from cloud.google.com/compute/docs/gpus/gpu-regions-zones)
DEFAULT_ZONES: dict[str, list[str]] = {
    "us-central1": ["us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"],
    "us-west1": ["us-west1-a", "us-west1-b", "us-west1-c"],
    "us-east1": ["us-east1-b", "us-east1-c", "us-east1-d"],
    "europe-west4": ["europe-west4-a", "europe-west4-b", "europe-west4-c"],
}
BUILT_IN_GPU_FAMILIES = ("a2-", "a3-", "g2-")
BOOT_DISK_GB = 100
TAG_ROLE = "dlrun-role"
META_CLUSTER_ID = "dlrun-cluster-id"
META_JOB_ID = "dlrun-job-id"
META_PRICE = "dlrun-price-per-hour"
# GCE deletes the instance this long after the node's own watchdog should have powered it off
CEILING_MARGIN_S = 600
MAX_RUN_DURATION_S = (30, 120 * 24 * 3600)


def label_value(value: str) -> str:
    """GCE label values: at most 63 of lowercase letters, digits, '_' and '-'."""
    return re.sub(r"[^a-z0-9_-]", "-", value.lower())[:63]


def instance_names(cluster_id: str, num_nodes: int) -> list[str]:
    base = cluster_tag(cluster_id)
    return [f"{base}-head"] + [f"{base}-w{i}" for i in range(1, num_nodes)]


def labels_for(request: ClusterRequest, *, is_head: bool) -> dict[str, str]:
    return {TAG_CLUSTER: slug(request.cluster_id), TAG_JOB: label_value(request.job_id),
            TAG_OWNER: label_value(request.owner or owner_identity()), TAG_ROLE: "head" if is_head else "worker"}


def accelerators_for(request: ClusterRequest, zone: str, project: str) -> list[compute_v1.AcceleratorConfig]:
    offer = request.offer
    if not offer.accelerator or offer.instance_type.startswith(BUILT_IN_GPU_FAMILIES):
        return []
    spec = gpu_spec(offer.accelerator)
    if not spec or not spec.gcp_accelerator_type:
        raise ProvisionError(f"{offer.accelerator} has no GCP accelerator type in the catalog",
                             cloud="gcp", region=offer.region)
    return [compute_v1.AcceleratorConfig(
        accelerator_type=f"projects/{project}/zones/{zone}/acceleratorTypes/{spec.gcp_accelerator_type}",
        accelerator_count=offer.accelerator_count)]


def scheduling_for(spot: bool, max_run_s: int = 0) -> compute_v1.Scheduling:
    if spot:
        scheduling = compute_v1.Scheduling(provisioning_model="SPOT", instance_termination_action="DELETE",
                                           automatic_restart=False, on_host_maintenance="TERMINATE")
    else:
        scheduling = compute_v1.Scheduling(provisioning_model="STANDARD", automatic_restart=True,
                                           on_host_maintenance="TERMINATE")
    if max_run_s > 0:
        low, high = MAX_RUN_DURATION_S
        scheduling.max_run_duration = compute_v1.Duration(seconds=min(max(max_run_s + CEILING_MARGIN_S, low), high))
        scheduling.instance_termination_action = "DELETE"
    return scheduling


def instance_body(request: ClusterRequest, *, name: str, zone: str, project: str,
                  is_head: bool, script: str, ssh_public_key: str,
                  service_account: str = "") -> compute_v1.Instance:
    """`service_account`: the email of the node account (infra/gcp/storage.py) the VM runs as; none when empty."""
    offer = request.offer
    metadata = {"startup-script": script, "ssh-keys": f"{SSH_USER}:{ssh_public_key}",
                META_CLUSTER_ID: request.cluster_id, META_JOB_ID: request.job_id,
                META_PRICE: repr(offer.hourly(request.spot))}
    return compute_v1.Instance(
        name=name,
        machine_type=f"zones/{zone}/machineTypes/{offer.instance_type}",
        disks=[compute_v1.AttachedDisk(
            boot=True, auto_delete=True, type_="PERSISTENT",
            initialize_params=compute_v1.AttachedDiskInitializeParams(
                source_image=image_for(request), disk_size_gb=BOOT_DISK_GB,
                disk_type=f"zones/{zone}/diskTypes/pd-balanced"))],
        network_interfaces=[compute_v1.NetworkInterface(
            network=network_link(project), subnetwork=subnetwork_link(project, offer.region),
            access_configs=[compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")])],
        guest_accelerators=accelerators_for(request, zone, project),
        scheduling=scheduling_for(request.spot, request.bootstrap.max_run_s if request.bootstrap else 0),
        labels=labels_for(request, is_head=is_head),
        tags=compute_v1.Tags(items=[cluster_tag(request.cluster_id)]),
        metadata=compute_v1.Metadata(items=[compute_v1.Items(key=k, value=v) for k, v in metadata.items()]),
        service_accounts=[compute_v1.ServiceAccount(email=service_account, scopes=list(NODE_SCOPES))]
        if service_account else [],
    )


def metadata_of(instance) -> dict[str, str]:
    return {i.key: i.value for i in instance.metadata.items} if instance.metadata else {}


def addresses_of(instance) -> tuple[str, str]:
    """(internal IP, external IP) of the first network interface."""
    if not instance.network_interfaces:
        return "", ""
    nic = instance.network_interfaces[0]
    public = nic.access_configs[0].nat_i_p if nic.access_configs else ""
    return nic.network_i_p, public
