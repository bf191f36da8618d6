"""A job's container image (`image:` in the job file): its reference, the registry that serves it, the
credentials users keep for it, and the container runtime that runs it.

reference.py  an OCI reference, normalised as docker does (docker.io, library/, :latest)
credentials.py the credentials for a registry: the docker/podman auth file and its credential helpers,
               ECR's authorization token, Google's OAuth token (Artifact Registry, gcr.io)
registry.py   a small OCI distribution client: the manifest for a platform and its compressed size
runtime.py    podman or docker on this machine, and the argv that runs a command in an image
run_job.py    the local job's entrypoint when `image:` is set: mounts, env, GPUs, then exec the runtime
"""
