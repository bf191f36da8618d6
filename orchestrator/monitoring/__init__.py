"""Watching a cluster from this machine: the Ray dashboard of a job's head (through an SSH tunnel to a
cloud head, with a one-use login link) in `dashboard.py`, and the Prometheus/Grafana processes that give
the dashboard its charts in `metrics_stack.py`. The CLI (`dlrun dashboard`) only calls and prints."""
