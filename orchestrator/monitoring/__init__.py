"""Watching jobs and clusters from this machine: the Ray dashboard of a job's head (through an SSH tunnel to a
cloud head, with a one-use login link) in `dashboard.py`, the Prometheus/Grafana processes that give the
dashboard its charts in `metrics_stack.py`, what jobs cost so far and per day in `costs.py`, a job's log as it
grows in `job_log.py`, and what a team cluster holds in `cluster_capacity.py`. The CLI (`dlrun dashboard`,
`status`, `cost-report`, `logs`, `clusters`) only calls and prints."""
