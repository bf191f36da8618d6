"""A plain PyTorch loop with a tqdm bar per epoch, as its author wrote it: nothing dlrun-specific in it.

It prints a bar per epoch (`epoch 2/8: 45%|████ | 58/128 [00:01<00:02, 52.1it/s, loss=0.41]`) and
a line per epoch (`epoch 2/8 loss=0.4102 accuracy=0.8715`). dlrun reads both (jobs/tee.py).
"""
import argparse

import torch
import torch.nn.functional as F
from tqdm import tqdm


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--samples", type=int, default=32768)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(args.samples, 64)
    y = (x[:, :8].sum(1) > 0).long()
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(len(x))
        bar = tqdm(range(0, len(x), 32), desc=f"epoch {epoch}/{args.epochs}")
        for i in bar:
            idx = order[i:i + 32]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
        with torch.no_grad():
            out = model(x)
            accuracy = (out.argmax(1) == y).float().mean().item()
            print(f"epoch {epoch}/{args.epochs} loss={F.cross_entropy(out, y).item():.4f} accuracy={accuracy:.4f}",
                  flush=True)


if __name__ == "__main__":
    main()
