"""A plain PyTorch loop with nested tqdm bars, as its author wrote it: `trange` over the epochs outside,
`tqdm(..., leave=False)` over the batches inside (cleared and drawn again each epoch). Nothing dlrun-specific.

dlrun reads the outer bar as the run and each round of the inner one as one step of it (jobs/progress.py).
"""
import argparse

import torch
import torch.nn.functional as F
from tqdm import tqdm, trange


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=150)
    p.add_argument("--samples", type=int, default=2048)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(args.samples, 64)
    y = (x[:, :8].sum(1) > 0).long()
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in trange(args.epochs, desc="training"):
        order = torch.randperm(len(x))
        bar = tqdm(range(0, len(x), 32), desc="batches", leave=False)
        for i in bar:
            idx = order[i:i + 32]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)


if __name__ == "__main__":
    main()
