"""How a GCE node ends itself: it deletes its own instance (and so its auto-delete boot disk).

Why: a guest power-off on Compute Engine only *stops* the instance (status TERMINATED; its persistent
disk is still billed: cloud.google.com/compute/docs/instances/stop-start-instance). `instanceTerminationAction
= DELETE` applies to preemption and to `maxRunDuration`/`terminationTime` only
(cloud.google.com/compute/docs/instances/limit-vm-runtime), not to a shutdown the guest asks for. So the
node's watchdog (infra/vm/watchdog.sh) runs the script made here before it powers off.

What it needs, and nothing more (no key on the node, no gcloud):
- a service account on the instance (dlrun's per-cluster node account, infra/gcp/storage.py) with the
  `https://www.googleapis.com/auth/compute` scope among the instance's scopes;
- an IAM binding that lets that account delete *its own instance only*: dlrun sets the instance's own
  IAM policy (instances.setIamPolicy, an instance-level policy: cloud.google.com/compute/docs/access/
  iam-policies-for-compute-engine-resources) granting roles/compute.instanceAdmin.v1 to the node account,
  and the same on the instance's boot disk (disks.setIamPolicy), so that the auto-delete of the disk is
  allowed whether or not GCE checks compute.disks.delete against the caller (the docs do not say). A
  policy on one resource grants nothing on any other: a node cannot touch another cluster's instances,
  nor another node of its own cluster.
- the metadata server (169.254.169.254, header `Metadata-Flavor: Google`): instance/name, instance/zone
  (`projects/NUMBER/zones/ZONE`), project/project-id, and instance/service-accounts/default/token (a
  short-lived OAuth token of the node account: cloud.google.com/compute/docs/access/authenticate-workloads).

The script is python3's standard library only (stock Ubuntu/Debian images have python3; the Deep Learning
VM images too). It asks for the deletion (DELETE .../instances/NAME), retries with backoff while the call
fails (a fresh IAM binding takes a while to apply: cloud.google.com/iam/docs/access-change-propagation;
429/5xx), then waits for GCE to shut the VM down (GCE stops the guest and deletes the instance; the VM
does not outlive that). If it cannot get the deletion accepted it says why and returns, and the watchdog
powers the VM off all the same: a stopped instance costs only its disk, and `dlrun down --orphans` finds it.

Real tools: Ray's and SkyPilot's GCP nodes stop/delete themselves with broad project roles given to a
shared service account (Ray's autoscaler: roles/compute.admin on the project; SkyPilot's autostop runs its
own `sky down` on the head with the skypilot-v1 account); dlrun narrows that to one instance per grant.

The Compute Engine endpoint is Google's, or the one the user configured (DLRUN_GCP_API_ENDPOINT, e.g. a
Private Service Connect endpoint), written into the script as a literal (an endpoint is no secret).
"""
from __future__ import annotations

DEFAULT_ENDPOINT = "https://compute.googleapis.com"
SELF_DELETE_ROLE = "roles/compute.instanceAdmin.v1"
COMPUTE_SCOPE = "https://www.googleapis.com/auth/compute"
TRIES = 12          # deletion requests before the script gives up (about 6 minutes with the backoff)
GRACE_S = 180       # how long it waits for GCE to stop and delete the VM once the request was accepted

_SCRIPT = r'''
import json, random, sys, time, urllib.error, urllib.request
ENDPOINT, TRIES, GRACE_S = %(endpoint)r, %(tries)d, %(grace)d
MD = "http://169.254.169.254/computeMetadata/v1/"
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy

def say(text):
    print("dlrun self-delete: " + text, flush=True)

def md(path):
    req = urllib.request.Request(MD + path, headers={"Metadata-Flavor": "Google"})
    with DIRECT.open(req, timeout=10) as r:
        return r.read().decode()

try:
    name, zone = md("instance/name"), md("instance/zone").rsplit("/", 1)[-1]
    project = md("project/project-id")
except OSError as e:
    say("the metadata server did not answer (%%s): not deleted" %% e)
    sys.exit(1)
url = "%%s/compute/v1/projects/%%s/zones/%%s/instances/%%s" %% (ENDPOINT, project, zone, name)
for attempt in range(1, TRIES + 1):
    try:
        token = json.loads(md("instance/service-accounts/default/token"))["access_token"]
        req = urllib.request.Request(url, method="DELETE", headers={"Authorization": "Bearer " + token})
        with urllib.request.urlopen(req, timeout=30) as r:
            op = json.loads(r.read() or b"{}")
        say("GCE accepted the deletion of %%s (%%s); waiting for it to stop this VM" %% (name, op.get("name", "")))
        time.sleep(GRACE_S)
        say("still running %%d s after the deletion was accepted" %% GRACE_S)
        sys.exit(0)
    except urllib.error.HTTPError as e:
        if e.code == 404:
            say("%%s is already being deleted" %% name)
            sys.exit(0)
        try:
            why = json.loads(e.read()).get("error", {}).get("message", "")
        except ValueError:
            why = ""
        say("try %%d: HTTP %%d %%s" %% (attempt, e.code, why))
    except (OSError, ValueError, KeyError) as e:
        say("try %%d: %%s" %% (attempt, e))
    time.sleep(min(60.0, 2.0 * 2 ** attempt) * random.uniform(0.5, 1.0))
say("gave up: the VM is only powered off (a stopped instance keeps its disk; `dlrun down --orphans` removes it)")
sys.exit(1)
'''


def endpoint_url(api_endpoint: str | None) -> str:
    """The base URL a node calls: Google's, or the configured endpoint (a bare host means https)."""
    endpoint = (api_endpoint or DEFAULT_ENDPOINT).rstrip("/")
    return endpoint if "://" in endpoint else f"https://{endpoint}"


def self_end_script(api_endpoint: str | None = None) -> str:
    """BootstrapConfig.self_end for a GCE node: bash that runs the deletion above with python3."""
    body = _SCRIPT % {"endpoint": endpoint_url(api_endpoint), "tries": TRIES, "grace": GRACE_S}
    return f"exec python3 - <<'DLRUN_GCE_SELF_DELETE'\n{body.strip()}\nDLRUN_GCE_SELF_DELETE\n"
