"""The model of the user-job example: a small MLP over the 8×8 digit images (64 pixels)."""
import torch.nn as nn


class TinyMLP(nn.Module):
    def __init__(self, hidden: int = 256, classes: int = 10):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x):
        return self.net(x)
