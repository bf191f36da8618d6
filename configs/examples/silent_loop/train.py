"""A script that prints nothing at all: a plain PyTorch loop that only saves its model at the end.

dlrun learns nothing of its progress from it; its probe run times it to its end (when it ends within
the probe's limit), and `dlrun submit` shows it running, its elapsed time and cost.
"""
import argparse

import torch
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=28000)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(args.steps):
        x = torch.randn(64, 64)
        loss = F.cross_entropy(model(x), (x[:, 0] > 0).long())
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.save(model.state_dict(), "model.pt")


if __name__ == "__main__":
    main()
