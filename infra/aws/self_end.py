"""Nothing here: an EC2 node ends itself by powering off (InstanceInitiatedShutdownBehavior=terminate, compute.py);
a guest power-off only stops a GCE instance, hence gcp/self_end.py."""
