"""Nothing here: GCE networks are global; dlrun's own network and its subnet per region are network.py's (AWS must
pick a VPC per region, hence aws/vpc.py)."""
