"""A plain PyTorch script with nested tqdm bars, as its author wrote it: a stacked LSTM learning the running sum
of sequences it makes itself; `trange` over the epochs outside, `tqdm(..., leave=False)` over the batches inside
(cleared and drawn again each epoch). Nothing dlrun-specific, and torch's threads left at their default.

dlrun reads the outer bar as the run and each round of the inner one as one step of it (jobs/progress.py).
"""
import argparse

import torch
import torch.nn.functional as F
from tqdm import tqdm, trange


class Model(torch.nn.Module):
    def __init__(self, features: int, hidden: int, layers: int):
        super().__init__()
        self.lstm = torch.nn.LSTM(features, hidden, num_layers=layers, batch_first=True)
        self.head = torch.nn.Linear(hidden, 1)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=150)
    p.add_argument("--batches", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--hidden", type=int, default=96)
    args = p.parse_args()
    torch.manual_seed(0)
    x = torch.randn(args.batches * args.batch_size, 24, 8)
    y = x.sum(dim=(1, 2)).unsqueeze(1) / 8
    model = Model(8, args.hidden, layers=2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in trange(args.epochs, desc="training"):
        for b in tqdm(range(args.batches), desc="batches", leave=False):
            i = slice(b * args.batch_size, (b + 1) * args.batch_size)
            loss = F.mse_loss(model(x[i]), y[i])
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
