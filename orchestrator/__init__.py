"""dlrun's control plane. Nothing here imports ray, torch, boto3 or google.cloud at module top."""
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
