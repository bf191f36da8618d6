"""A PyTorch Lightning script as its author wrote it: nothing dlrun-specific in it.

A small MLP on a synthetic two-class problem (data made here, nothing downloaded), trained by
Lightning's Trainer. It prints what Lightning prints: its progress bar (`Epoch 3: 45%|...| 14/32
[..., train_loss=0.31]`) and the logged metrics. dlrun reads them from its output (jobs/tee.py).

The bar is Lightning's TQDMProgressBar: with `rich` installed Lightning's default is its
RichProgressBar, which, when the output is not a terminal (a log file, as under Ray), is drawn once,
when training ends — dlrun would see the progress only then.
"""
import argparse

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import TQDMProgressBar
from torch.utils.data import DataLoader, TensorDataset


class Classifier(L.LightningModule):
    def __init__(self, features: int = 32, hidden: int = 256, lr: float = 1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.ReLU(),
                                       torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def data(n: int, features: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    y = (x[:, :4].sum(1) > 0).long()
    return TensorDataset(x, y)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--samples", type=int, default=24576)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    train = DataLoader(data(args.samples, 32, 0), batch_size=32, shuffle=True)
    val = DataLoader(data(1024, 32, 1), batch_size=256)
    trainer = L.Trainer(max_epochs=args.epochs, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, callbacks=[TQDMProgressBar(refresh_rate=20)])
    trainer.fit(Classifier(), train, val)


if __name__ == "__main__":
    main()
