"""Nothing here: botocore's "standard" retry mode (provider.py's Config) retries EC2's throttling; Google's
Compute Engine clients retry no rate limit, hence gcp/retry.py."""
