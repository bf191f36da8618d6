"""Predicted against measured GPU step times, for a suite of plain PyTorch training loops (needs a CUDA GPU).

Each loop is what a user writes, with PyTorch's defaults: the model on the GPU, a batch copied from pinned
memory every step, autocast for fp16/bf16 (GradScaler with fp16), foreach Adam, `loss.item()` each step. The
prediction is dlrun's GPU model alone (gpu_time.py from the calibration), not its measurement of this GPU,
for the GPU of the table this one is. Printed per model: measured, predicted, their ratio and whether the
measured step lies in the predicted range; then the geometric-mean error (exp of the mean |log ratio|) and
the worst, for the models the calibration was checked against (`seen`) and the others (`held out`).

Without CUDA it prints the predictions for --gpu (default H200) and says so. With `--measured DIR` (a device run's
$OUT, e.g. ../shared/calibration/h200_device_run_2026-11-28) it takes each model's measured step from that run's
estimator_gpu.txt and prints the same table without a GPU: CI-time changes to the model checked against a real GPU.

    python bench/estimator_gpu.py [--gpu NAME] [--only NAME,...] [--steps 20] [--budget-seconds 400]
                                  [--breakdown FILE] [--local-check] [--measured DIR]
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

BERT = {"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
        "intermediate_size": 3072, "vocab_size": 30522, "num_labels": 2}
GPT2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}
T5 = {"model_type": "t5", "d_model": 512, "num_layers": 6, "num_heads": 8, "d_ff": 2048, "vocab_size": 32128,
      "decoder_start_token_id": 0, "pad_token_id": 0}
IMAGE = {"input_shape": [3, 224, 224], "num_classes": 1000}


def _w(**kw) -> dict:
    return {"dataset_size": 100_000, "epochs": 1, **kw}


# (name, seen by the calibration's checks: True / held out: False, workload)
SUITE = [
    ("resnet50 fp32", True, _w(model="bench.gpu_models:ResNet50", batch_size=64, **IMAGE)),
    ("resnet50 fp16", True, _w(model="bench.gpu_models:ResNet50", batch_size=64, precision="fp16", **IMAGE)),
    ("resnet50 bf16", True, _w(model="bench.gpu_models:ResNet50", batch_size=64, precision="bf16", **IMAGE)),
    ("resnet50 bf16 channels_last", True, _w(model="bench.gpu_models:ResNet50", batch_size=64, precision="bf16",
                                             memory_format="channels_last", **IMAGE)),
    ("bert-base bf16 s128", True, _w(hf=BERT, seq_len=128, batch_size=32, precision="bf16", num_classes=2)),
    ("lstm h1024 fp32", True, _w(model="bench.gpu_models:LSTMClassifier", input_shape=[128], input_dtype="long",
                                 batch_size=64)),
    ("gpt2 bf16 s1024", True, _w(hf=GPT2, seq_len=1024, batch_size=8, precision="bf16")),
    ("course cnn fp32", True, _w(model="jobs.cnn:SimpleCNN", input_shape=[1, 8, 8], batch_size=32)),
    ("vgg11 fp16", False, _w(model="bench.gpu_models:VGG11", batch_size=64, precision="fp16", **IMAGE)),
    ("mobilenetv2 fp32", False, _w(model="bench.gpu_models:MobileNetV2", batch_size=128, **IMAGE)),
    ("mobilenetv2 bf16 channels_last", False, _w(model="bench.gpu_models:MobileNetV2", batch_size=128,
                                                 precision="bf16", memory_format="channels_last", **IMAGE)),
    # seen since 2026-11-28: its profiled depthwise 7×7 kernels are the only measurement of that class
    # (bench/step_kernels.py); MobileNetV2's depthwise 3×3 stay held out and check how the fit travels
    ("convnext-tiny bf16", True, _w(model="bench.gpu_models:ConvNeXtTiny", batch_size=64, precision="bf16",
                                     **IMAGE)),
    ("vit-small bf16", False, _w(model="bench.gpu_models:ViTSmall", batch_size=128, precision="bf16", **IMAGE)),
    ("gru h768 bf16", False, _w(model="bench.gpu_models:GRUClassifier", input_shape=[256], input_dtype="long",
                                batch_size=64, precision="bf16")),
    ("t5-small bf16 s256", False, _w(hf=T5, seq_len=256, batch_size=32, precision="bf16")),
    ("bert-base fp32 tf32 s128", False, _w(hf=BERT, seq_len=128, batch_size=32, tf32=True, num_classes=2)),
    # added 2026-11-28 for the next device run: never fitted (other sizes, optimizers, GradScaler on a transformer)
    ("resnet50 bf16 fused adam b32", False, _w(model="bench.gpu_models:ResNet50", batch_size=32, precision="bf16",
                                               optimizer_impl="fused", **IMAGE)),
    ("vit-small fp16 b64", False, _w(model="bench.gpu_models:ViTSmall", batch_size=64, precision="fp16", **IMAGE)),
    ("gpt2-6l bf16 s512 b16", False, _w(hf=GPT2 | {"n_layer": 6}, seq_len=512, batch_size=16, precision="bf16")),
    ("mobilenetv2 bf16 b64", False, _w(model="bench.gpu_models:MobileNetV2", batch_size=64, precision="bf16",
                                       **IMAGE)),
    ("lstm h512 bf16 b128", False, _w(model="bench.gpu_models:LSTMClassifier", input_shape=[128], input_dtype="long",
                                      batch_size=128, precision="bf16")),
    ("bert-base bf16 s512 b8", False, _w(hf=BERT, seq_len=512, batch_size=8, precision="bf16", num_classes=2)),
    ("resnet50 sgd for-loop fp32 b128", False, _w(model="bench.gpu_models:ResNet50", batch_size=128, optimizer="sgd",
                                                  optimizer_impl="for-loop", **IMAGE)),
]


def plain_step(workload):
    """The plain loop a user writes for `workload` on the GPU, one step as a callable `run(dispatched=None)`:
    `dispatched()` is called once every op of the step is queued, before `loss.item()` waits for the GPU."""
    import torch

    from orchestrator.estimate.profile import build_model, loss_of, make_batch

    tf32, memory_format, impl = workload.math
    torch.backends.cuda.matmul.allow_tf32 = tf32
    model = build_model(workload, "cuda").train()
    x, y = make_batch(workload, "cpu")
    if memory_format == "channels_last":
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x
    x, y = x.pin_memory(), y.pin_memory()
    opt = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}.get(workload.optimizer, torch.optim.SGD)(
        model.parameters(), lr=1e-3, **({"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}))
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(workload.precision)
    scaler = torch.amp.GradScaler("cuda", enabled=workload.precision == "fp16")

    def run(dispatched=None) -> None:
        xb, yb = x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True)
        with torch.autocast("cuda", dtype=half or torch.float32, enabled=half is not None):
            loss = loss_of(model(xb), yb, workload.num_classes)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if dispatched:
            dispatched()
        loss.item()

    return run


def training_step(workload):
    """One step of the plain loop (plain_step) as a callable returning its seconds."""
    run = plain_step(workload)

    def step() -> float:
        t0 = time.perf_counter()
        run()
        return time.perf_counter() - t0

    return step


def measure(step, steps: int) -> float:
    """Median seconds of `steps` calls of a training step, after warm-ups."""
    for _ in range(5):
        step()
    return statistics.median(step() for _ in range(steps))


def recorded_steps(run_dir: Path) -> tuple[str, dict[str, float]]:
    """(the GPU it ran on, model -> measured step seconds) from a device run's estimator_gpu.txt."""
    text = (run_dir / "estimator_gpu.txt").read_text()
    gpu_line = (run_dir / "gpu.txt").read_text().splitlines()[-1] if (run_dir / "gpu.txt").exists() else ""
    measured = {}
    names = sorted((n for n, _, _ in SUITE), key=len, reverse=True)
    for line in text.splitlines():
        name = next((n for n in names if line.startswith(n + " ")), None)
        fields = line[len(name):].split() if name else []
        if fields and fields[0].endswith("ms"):
            measured[name] = float(fields[0].removesuffix("ms")) * 1e-3
    return gpu_line.split(",")[0].strip(), measured


def predict(workload, gpu: str):
    from infra.catalog import gpu_spec
    from orchestrator.estimate.estimator import gpu_step, range_factor
    from orchestrator.estimate.profile import profile_now

    step = gpu_step(profile_now(workload, measure_local=False), gpu_spec(gpu))
    spread = range_factor(step.sigma)
    return step, step.seconds / spread, step.seconds * spread


def local_check(workload, others=("H100", "A100", "L4")) -> None:
    """dlrun's own measurement of this GPU (as `dlrun plan` takes it: steps, then each kernel class's busy time)
    and the other GPUs scaled from it per class, against the GPU model alone."""
    from orchestrator.estimate.estimator import estimate_on_gpu
    from orchestrator.estimate.profile import _measure_on_local_gpu, profile_now

    p = profile_now(workload, measure_local=False)
    _measure_on_local_gpu(workload, p)
    busy = sum(p.local_gpu_kinds.values())
    print(f"# local GPU {p.gpu_name or '?'}: step {p.local_step_seconds.get('cuda', 0) * 1e3:.2f} ms, kernels busy "
          f"{busy * 1e3:.2f} ms: " + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in sorted(p.local_gpu_kinds.items())))
    for gpu in others:
        scaled = estimate_on_gpu(p, gpu)
        alone = estimate_on_gpu(profile_now(workload, measure_local=False), gpu)
        print(f"#   {gpu}: {scaled.step_seconds * 1e3:.2f} ms {scaled.basis} ({scaled.detail}); the model alone "
              f"{alone.step_seconds * 1e3:.2f} ms")


def class_line(recorded: dict[str, float], predicted) -> str:
    """A model's recorded GPU ms per kernel class beside the prediction's (gpu_time.StepTime), and its host."""
    kinds = sorted(k for k in set(recorded) | set(predicted.by_kind) if k != "host")
    return ("    GPU ms, recorded/predicted: " + ", ".join(
        f"{k} {recorded.get(k, 0.0):.1f}/{predicted.by_kind.get(k, 0.0) * 1e3:.1f}" for k in kinds)
        + f"; host {predicted.host_seconds * 1e3:.1f} predicted")


def local_gpu_name_of(device_name: str) -> str | None:
    """The GPU of the table an nvidia-smi name is ('NVIDIA H200' -> 'H200')."""
    from infra.catalog import gpu_spec

    words = device_name.replace("NVIDIA", "").split()
    for n in range(len(words), 0, -1):
        spec = gpu_spec("".join(words[:n]))
        if spec is not None:
            return spec.name
    return None


def _what_to_compare(args):
    """(measure on this GPU?, the GPU to predict for, where the measurements come from, recorded steps by model,
    recorded GPU ms per class by model)."""
    import torch

    import gpu_breakdown

    from infra.local.gpus import local_gpu_name

    if args.measured:
        ran_on, recorded = recorded_steps(args.measured)
        classes = {}
        if args.classes and (args.measured / "breakdown.csv").exists():
            classes = gpu_breakdown.recorded_classes(args.measured / "breakdown.csv")
        gpu = args.gpu or local_gpu_name_of(ran_on) or "H200"
        return False, gpu, f"measured on an {ran_on or gpu}, recorded in {args.measured}", recorded, classes
    cuda = torch.cuda.is_available()
    gpu = args.gpu or (local_gpu_name() if cuda else None) or "H200"
    where = (f"measured on this machine's {torch.cuda.get_device_name()}" if cuda
             else "no CUDA GPU here: predictions only")
    return cuda, gpu, where, {}, {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", help="the GPU of the table to predict for (default: this machine's, else H200)")
    ap.add_argument("--only", help="comma-separated model names of the suite")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--budget-seconds", type=float, default=400, help="stop measuring new models after this")
    ap.add_argument("--local-check", action="store_true",
                    help="also time the first model of the suite as dlrun's profile does and scale it per class")
    ap.add_argument("--measured", type=Path, help="a device run's output folder: its measured steps, no GPU needed")
    ap.add_argument("--classes", action="store_true", help="with --measured: under each model, its recorded GPU time "
                                                           "per kernel class against the prediction's")
    ap.add_argument("--breakdown", type=Path, help="write per kernel class measured vs predicted ms (torch.profiler) "
                                                   "and each model's top ops to this CSV")
    args = ap.parse_args()
    import torch

    import gpu_breakdown

    from orchestrator.estimate.workload import Workload

    cuda, gpu, where, recorded, classes = _what_to_compare(args)
    print(f"# estimator_gpu: predicted for {gpu}; {where}; torch {torch.__version__}")
    print(f"{'model':34s} {'measured':>10s} {'predicted':>10s} {'range':>19s} {'ratio':>6s}  in range  set")
    started, ratios, breakdown = time.perf_counter(), {True: [], False: []}, []
    only = set(args.only.split(",")) if args.only else None
    for name, seen, fields in SUITE:
        if (only and name not in only) or (args.measured and name not in recorded):
            continue  # a recorded run: only the loops it measured
        workload = Workload(**fields)
        predicted, low, high = predict(workload, gpu)
        pred, meas = predicted.seconds, recorded.get(name)
        if meas is None and cuda and time.perf_counter() - started < args.budget_seconds:
            try:
                step = training_step(workload)
                meas = measure(step, args.steps)
                if args.breakdown:
                    breakdown += gpu_breakdown.breakdown_rows(name, step, meas, predicted)
                    gpu_breakdown.write(args.breakdown, breakdown)  # after each model: a timeout keeps the rest
                del step
            except torch.cuda.OutOfMemoryError:
                pass
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.cuda.empty_cache()
        span = f"{low * 1e3:8.2f}-{high * 1e3:8.2f}"
        if meas is None:
            print(f"{name:34s} {'-':>10s} {pred * 1e3:9.2f}ms {span}", flush=True)
            continue
        ratio = pred / meas
        ratios[seen].append(ratio)
        print(f"{name:34s} {meas * 1e3:9.2f}ms {pred * 1e3:9.2f}ms {span} {ratio:6.2f}  "
              f"{'yes' if low <= meas <= high else 'NO':8s}  {'seen' if seen else 'held out'}", flush=True)
        if name in classes:
            print(class_line(classes[name], predicted))
    if breakdown:
        print(f"breakdown: {len(breakdown)} rows in {args.breakdown}")
    if args.local_check and cuda:
        first = next((f for n, _, f in SUITE if not only or n in only), SUITE[0][2])
        local_check(Workload(**first))
    for seen, rs in ratios.items():
        if rs:
            errors = [abs(math.log(r)) for r in rs]
            print(f"{'seen' if seen else 'held out'}: {len(rs)} models, geometric-mean error "
                  f"x{math.exp(statistics.mean(errors)):.2f}, worst x{math.exp(max(errors)):.2f}")


if __name__ == "__main__":
    main()
