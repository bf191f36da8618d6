"""A user's own training script, as dlrun runs it: `python train.py` in this directory.

It follows dlrun's two contracts, and runs the same without dlrun (no checkpoints, plain output):
- checkpoints: save to $DLRUN_CHECKPOINT_DIR every epoch, resume from the latest one (jobs.checkpoint);
- progress: one jobs.metrics.report() per epoch (epoch, epochs, loss, accuracy, samples_per_s), the
  final metrics with report_result(). dlrun shows them live and uses them to time a probe run.
With `data:` in the job file, the images come from $DLRUN_DATA_DIR/digits.npz (arrays `images`, `labels`)
instead of scikit-learn's copy.
"""
import argparse
import os
import time

import numpy as np

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from jobs.checkpoint import open_checkpoints
from jobs.metrics import report, report_event, report_result
from model import TinyMLP


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)

    images, labels = load_data()
    x = torch.tensor(images / 16.0, dtype=torch.float32)
    y = torch.tensor(labels)
    tx, vx, ty, vy = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)

    model = TinyMLP()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    store = open_checkpoints()  # None when run without dlrun
    state = store.load_latest() if store else None
    start = 0
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["epoch"]
        report_event("resumed", epoch=start)

    for epoch in range(start + 1, args.epochs + 1):
        t0 = time.perf_counter()
        model.train()
        order = torch.randperm(len(tx), generator=torch.Generator().manual_seed(epoch))
        for i in range(0, len(tx), args.batch_size):
            idx = order[i:i + args.batch_size]
            loss = F.cross_entropy(model(tx[idx]), ty[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        val_loss, accuracy = evaluate(model, vx, vy)
        if store:
            store.save({"epoch": epoch, "model": model.state_dict(), "optimizer": opt.state_dict()}, epoch)
        report(epoch=epoch, epochs=args.epochs, loss=round(loss.item(), 5), val_loss=round(val_loss, 5),
               accuracy=round(accuracy, 4), samples_per_s=round(len(tx) / (time.perf_counter() - t0), 1))
    val_loss, accuracy = evaluate(model, vx, vy)  # also when resumed from the last epoch's checkpoint
    report_result(accuracy=round(accuracy, 4), val_loss=round(val_loss, 5), epochs=args.epochs)


def load_data():
    """(images, labels): from the job's data inputs when it has some, else scikit-learn's digits."""
    data_dir = os.environ.get("DLRUN_DATA_DIR")
    if not data_dir:
        digits = load_digits()  # ships with scikit-learn: no download
        return digits.images, digits.target
    with np.load(os.path.join(data_dir, "digits.npz")) as f:
        images, labels = f["images"], f["labels"]
    print(f"data: {len(images)} images from {data_dir}", flush=True)
    return images, labels


def evaluate(model, x, y):
    model.eval()
    with torch.no_grad():
        out = model(x)
        return F.cross_entropy(out, y).item(), (out.argmax(1) == y).float().mean().item()


if __name__ == "__main__":
    main()
