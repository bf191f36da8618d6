"""Small torch models the planning tests profile, named in job files as tests.support.models:NAME."""
import torch.nn as nn

IN, HIDDEN, OUT = 32, 64, 10


def TwoLayerMLP(hidden: int = HIDDEN):
    return nn.Sequential(nn.Flatten(), nn.Linear(IN, hidden), nn.ReLU(), nn.Linear(hidden, OUT))


def TinyCNN(channels: int = 8):
    return nn.Sequential(nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(channels * 4 * 4, 10))


def BigMLP(width: int = 4096, depth: int = 48):
    """~805 M parameters: with Adam about 13 GB of state, more than a K80's 12 GB."""
    layers = [nn.Flatten(), nn.Linear(64, width)]
    for _ in range(depth):
        layers += [nn.ReLU(), nn.Linear(width, width)]
    return nn.Sequential(*layers, nn.Linear(width, 10))
