"""Data-parallel training of a built-in job through Ray Train's TorchTrainer.

`python -m jobs.cnn --num-workers N` lands here: N Ray Train workers (gloo on CPU, NCCL on GPUs)
each run jobs.train.train() on their shard of every epoch; rank 0 writes the checkpoints and
prints the DLRUN_METRIC lines (Ray prefixes them with "(RayTrainWorker pid=...)"); this driver
prints the DLRUN_RESULT line.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import asdict

import ray
import ray.train
import ray.train.torch
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

from jobs.train import Job, Rank, TrainConfig, train


def train_with_ray(job: Job, cfg: TrainConfig) -> dict:
    """Data-parallel training through Ray Train's TorchTrainer (gloo on CPU, NCCL on GPUs).

    Attaches to the Ray cluster of $RAY_ADDRESS (as inside a Ray job), else starts a private
    local one. Rank 0 writes the checkpoints and prints the per-epoch lines.
    """
    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):
            ray.init(log_to_driver=True)
        else:
            ray.init(address="local", include_dashboard=False,
                     num_cpus=max(os.cpu_count() or 1, cfg.num_workers + 1))
    if cfg.device == "auto":
        use_gpu = ray.cluster_resources().get("GPU", 0) >= cfg.num_workers
    else:
        use_gpu = cfg.device == "cuda"
    # Ray Train V2 keeps reported metrics only alongside checkpoints, and ours live in the
    # job's own checkpoint location, so rank 0 hands its result to this tiny actor instead.
    result_box = ray.remote(num_cpus=0)(_ResultBox).remote()
    trainer = TorchTrainer(
        _ray_train_worker,
        train_loop_config={"module": job.module, "config": asdict(cfg), "result_box": result_box,
                           # Ray starts workers with the raylet's environment, not ours
                           "env": {k: v for k, v in os.environ.items() if k.startswith("DLRUN_")}},
        # one worker per node where there are several: a multi-node cluster is there to be used
        scaling_config=ScalingConfig(num_workers=cfg.num_workers, use_gpu=use_gpu,
                                     placement_strategy="SPREAD" if _alive_nodes() > 1 else "PACK"),
        torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
        run_config=RunConfig(name=f"dlrun-{job.name}-{os.getpid()}"),
    )
    outcome = trainer.fit()
    if outcome.error is not None:
        raise outcome.error
    result_ref: ray.ObjectRef[dict | None] = result_box.get.remote()
    result = ray.get(result_ref)
    if result is None:  # rank 0 puts its result before its worker returns: fit() would have raised
        raise RuntimeError("Ray Train finished without the result of rank 0")
    return {**result, "worker_nodes": ray.get(result_box.nodes.remote())}


def _alive_nodes() -> int:
    return sum(1 for n in ray.nodes() if n.get("Alive"))


class _ResultBox:
    def __init__(self):
        self.result = None
        self.worker_nodes: set[str] = set()

    def put(self, result: dict) -> None:
        self.result = result

    def add_node(self, ip: str) -> None:
        self.worker_nodes.add(ip)

    def get(self) -> dict | None:
        return self.result

    def nodes(self) -> list[str]:
        """The distinct node addresses the workers ran on (a multi-node run shows several)."""
        return sorted(self.worker_nodes)


def _ray_train_worker(loop_config: dict) -> None:
    os.environ.update(loop_config["env"])
    job: Job = importlib.import_module(loop_config["module"]).JOB
    ctx = ray.train.get_context()
    device = ray.train.torch.get_device()
    where = Rank(rank=ctx.get_world_rank(), world_size=ctx.get_world_size(), device=str(device))
    ray.get(loop_config["result_box"].add_node.remote(ray.util.get_node_ip_address()))
    result = train(job, TrainConfig(**loop_config["config"]), where)
    if where.is_main:
        ray.get(loop_config["result_box"].put.remote(result))
