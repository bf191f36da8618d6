"""`dlrun submit --backend aws` against moto's server on a machine with no discoverable public address.

The whole run happens in a fresh network namespace (`unshare -rn`: only loopback, so no address lookup
can answer), with moto's server on its loopback and no DLRUN_SSH_CIDR: dlrun must stop at once (at most
one attempt), say so in one short message naming DLRUN_SSH_CIDR, and leave nothing in moto.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.job_files import CNN_ON_AWS_JOB

ROOT = Path(__file__).resolve().parents[2]

DRIVER = textwrap.dedent("""
    import json, os, subprocess, sys, time
    import boto3
    from moto.server import ThreadedMotoServer

    job, home = sys.argv[1], sys.argv[2]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    env = {k: v for k, v in os.environ.items() if k not in ("DLRUN_SSH_CIDR", "DLRUN_RAY_ADDRESS")}
    env.update(DLRUN_HOME=home, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
               AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=endpoint, AWS_EC2_METADATA_DISABLED="true",
               DLRUN_LOCAL_GPUS="none", RAY_USAGE_STATS_ENABLED="0")
    started = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "orchestrator.cli", "submit", job, "--backend", "aws"],
                       capture_output=True, text=True, env=env, timeout=300)
    wall = time.monotonic() - started
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=endpoint, aws_access_key_id="testing",
                       aws_secret_access_key="testing")
    instances = [i for res in ec2.describe_instances()["Reservations"] for i in res["Instances"]]
    groups = [g["GroupName"] for g in ec2.describe_security_groups()["SecurityGroups"] if g["GroupName"] != "default"]
    keys = [k["KeyName"] for k in ec2.describe_key_pairs()["KeyPairs"]]
    server.stop()
    print(json.dumps(dict(rc=r.returncode, stdout=r.stdout, stderr=r.stderr, wall=wall, keys=keys, groups=groups,
                          instances=[(i["InstanceId"], i["State"]["Name"]) for i in instances])))
""")


def test_no_caller_address_stops_at_once_with_a_short_message_and_leaves_nothing(tmp_path):
    if not shutil.which("unshare") or subprocess.run(["unshare", "-rn", "true"]).returncode != 0:
        pytest.skip("needs `unshare -rn` (user and network namespaces) for a machine without a public address")
    job = tmp_path / "job.yaml"
    job.write_text(CNN_ON_AWS_JOB)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    proc = subprocess.run(["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$0" "$@"',
                           sys.executable, str(driver), str(job), str(tmp_path / "home")],
                          capture_output=True, text=True, cwd=ROOT, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["rc"] not in (0, 1), out
    assert len(out["instances"]) <= 1, out["instances"]  # at most one attempt ever reached EC2
    assert [state for _, state in out["instances"] if state != "terminated"] == []
    assert out["groups"] == [] and out["keys"] == []
    error = out["stderr"].strip().splitlines()[-1]
    assert "DLRUN_SSH_CIDR" in error and len(out["stderr"].strip()) < 600, out["stderr"]
    assert "Traceback" not in out["stderr"]
