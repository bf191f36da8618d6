"""The Compute Engine instance dlrun asks for: machine type, GPUs, scheduling, image, labels, metadata.

GPU rules of the real API: N1 machine types take GPUs as `guestAccelerators` (type URL in the same
zone); accelerator-optimized families (a2, a3, g2) come with their GPUs and must not list them; any
VM with a GPU cannot live-migrate, so `onHostMaintenance` is TERMINATE (cloud.google.com/compute/docs/
gpus/gpu-host-maintenance), and so is every Spot VM (Spot VMs cannot live-migrate: docs/instances/spot).
A CPU on-demand VM keeps GCE's default, live migration (MIGRATE) with automaticRestart (both GCE's
defaults: cloud.google.com/compute/docs/instances/setting-instance-scheduling-options): a host event
then moves it without a reboot, where TERMINATE would stop it and restart it (the boot script running a
second time). Whether GCE accepts maxRunDuration together with MIGRATE is not stated on the pages read.

The boot disk is max(BootstrapConfig.root_volume_gb, the floor of its image kind): see boot_disk_gb.
`enable-oslogin=FALSE` is set on every instance: instance metadata overrides the project's
(cloud.google.com/compute/docs/oslogin/set-up-oslogin), so a project that turns OS Login on in its common
metadata still honours dlrun's per-cluster `ssh-keys`; an organisation policy
(constraints/compute.requireOsLogin) forbids that override, and the insert then fails (errors.py).

Hard ceiling: when the job has a deadline, every instance (on-demand or spot) carries
`scheduling.maxRunDuration` with `instanceTerminationAction: DELETE`, so GCE itself deletes it even if
the node's own watchdog (infra/vm/watchdog.sh, at max_run_s) never runs. GCE allows 30 s to 120 days
(cloud.google.com/compute/docs/instances/limit-vm-runtime, "Limitations").
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from google.cloud import compute_v1

from infra.gcp.images import image_for
from infra.gcp.storage import NODE_SCOPES
from infra.base import TAG_CLUSTER, TAG_JOB, TAG_OWNER, ClusterRequest, ProvisionError
from infra.identity import owner_identity
from infra.gcp.network import SSH_USER, cluster_tag, network_link, slug, subnetwork_link
from infra.catalog import gpu_spec
from infra.vm.provider import Prepared


@dataclass
class GcpPrepared(Prepared):
    """What every zone's inserts of one launch share (provider.prepare)."""

    public_key: str = ""       # the cluster's SSH public key line (the instance's `ssh-keys` metadata)
    service_account: str = ""  # the node account's email ("": none)

# zones dlrun tries, in order, per region (GPU zones from cloud.google.com/compute/docs/gpus/gpu-regions-zones)
DEFAULT_ZONES: dict[str, list[str]] = {
    "us-central1": ["us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"],
    "us-west1": ["us-west1-a", "us-west1-b", "us-west1-c"],
    "us-east1": ["us-east1-b", "us-east1-c", "us-east1-d"],
    "europe-west4": ["europe-west4-a", "europe-west4-b", "europe-west4-c"],
}
BUILT_IN_GPU_FAMILIES = ("a2-", "a3-", "g2-")
# Boot disk floors (GB), used when the plan asks for less (BootstrapConfig.root_volume_gb, 0: not planned).
# CPU: Canonical's ubuntu-2204-lts image is 10 GB; the venv with Ray, torch's CPU wheel and scikit-learn
# takes ~2 GB more, pip's cache as much again, and checkpoints and data inputs land there too: 20 GB.
# GPU: the Deep Learning VM image (CUDA, driver, conda) is far larger, torch's CUDA wheels add ~3-4 GB
# (and as much of pip cache): 100 GB, what dlrun always gave GPU nodes so far. GCE refuses a disk smaller
# than its image ("Requested disk size cannot be smaller than the image size (N GB)").
CPU_DISK_FLOOR_GB, GPU_DISK_FLOOR_GB = 20, 100
TAG_ROLE = "dlrun-role"
META_CLUSTER_ID = "dlrun-cluster-id"
META_JOB_ID = "dlrun-job-id"
META_PRICE = "dlrun-price-per-hour"
OS_LOGIN_KEY = "enable-oslogin"
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


def boot_disk_gb(request: ClusterRequest) -> int:
    """The planned root volume, never below the floor of the node's image kind."""
    planned = request.bootstrap.root_volume_gb if request.bootstrap else 0
    floor = GPU_DISK_FLOOR_GB if request.offer.accelerator else CPU_DISK_FLOOR_GB
    return max(int(planned or 0), floor)


def scheduling_for(spot: bool, max_run_s: int = 0, *, gpu: bool = True) -> compute_v1.Scheduling:
    """Spot: SPOT, deleted when reclaimed, no restart, TERMINATE. On demand: automaticRestart; MIGRATE for a
    CPU VM (live migration through host maintenance), TERMINATE for a GPU VM (it cannot migrate)."""
    if spot:
        scheduling = compute_v1.Scheduling(provisioning_model="SPOT", instance_termination_action="DELETE",
                                           automatic_restart=False, on_host_maintenance="TERMINATE")
    else:
        scheduling = compute_v1.Scheduling(provisioning_model="STANDARD", automatic_restart=True,
                                           on_host_maintenance="TERMINATE" if gpu else "MIGRATE")
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
    gpu = bool(offer.accelerator) or offer.instance_type.startswith(BUILT_IN_GPU_FAMILIES)
    metadata = {"startup-script": script, "ssh-keys": f"{SSH_USER}:{ssh_public_key}", OS_LOGIN_KEY: "FALSE",
                META_CLUSTER_ID: request.cluster_id, META_JOB_ID: request.job_id,
                META_PRICE: repr(offer.hourly(request.spot))}
    return compute_v1.Instance(
        name=name,
        machine_type=f"zones/{zone}/machineTypes/{offer.instance_type}",
        disks=[compute_v1.AttachedDisk(
            boot=True, auto_delete=True, type_="PERSISTENT",
            initialize_params=compute_v1.AttachedDiskInitializeParams(
                disk_name=name,  # (GCE's default too) the disk the node account may also delete
                source_image=image_for(request), disk_size_gb=boot_disk_gb(request),
                disk_type=f"zones/{zone}/diskTypes/pd-balanced"))],
        network_interfaces=[compute_v1.NetworkInterface(
            network=network_link(project), subnetwork=subnetwork_link(project, offer.region),
            access_configs=[compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")])],
        guest_accelerators=accelerators_for(request, zone, project),
        scheduling=scheduling_for(request.spot, request.bootstrap.max_run_s if request.bootstrap else 0, gpu=gpu),
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
