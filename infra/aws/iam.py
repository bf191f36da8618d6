"""Nothing here: boto3 has an IAM client, used directly for the node role (storage.py); GCP needs iam.py because
no Google IAM client library is installed."""
