"""Nothing here: a GCE quota error names its quota metric, which errors.py maps to a QuotaScope; EC2's errors do
not name the vCPU bucket, hence aws/quotas.py's table."""
