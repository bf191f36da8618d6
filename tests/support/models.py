"""Small torch models the planning tests profile, named in job files as tests.support.models:NAME."""
import torch.nn as nn

IN, HIDDEN, OUT = 32, 64, 10


def TwoLayerMLP(hidden: int = HIDDEN):
    return nn.Sequential(nn.Flatten(), nn.Linear(IN, hidden), nn.ReLU(), nn.Linear(hidden, OUT))


def TinyCNN(channels: int = 8, in_channels: int = 1):
    return nn.Sequential(nn.Conv2d(in_channels, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(channels * 4 * 4, 10))


def BigMLP(width: int = 4096, depth: int = 48):
    """~805 M parameters: with Adam about 13 GB of state, more than a K80's 12 GB."""
    layers = [nn.Flatten(), nn.Linear(64, width)]
    for _ in range(depth):
        layers += [nn.ReLU(), nn.Linear(width, width)]
    return nn.Sequential(*layers, nn.Linear(width, 10))


class _SequenceModel(nn.Module):
    def __init__(self, body: nn.Module, hidden: int, vocab: int):
        super().__init__()
        self.embed, self.body, self.head = nn.Embedding(vocab, hidden), body, nn.Linear(hidden, OUT)

    def forward(self, tokens):
        out = self.body(self.embed(tokens))
        return self.head((out[0] if isinstance(out, tuple) else out)[:, -1])


def TinyLSTM(hidden: int = 32, layers: int = 2, vocab: int = 50):
    """Tokens -> a stacked LSTM -> classes: cuDNN runs it as one kernel per layer."""
    return _SequenceModel(nn.LSTM(hidden, hidden, layers, batch_first=True), hidden, vocab)


def TinyTransformer(hidden: int = 32, heads: int = 4, layers: int = 2, vocab: int = 50):
    """Tokens -> transformer encoder layers with attention dropout (CPU's SDPA takes the math path for it)."""
    layer = nn.TransformerEncoderLayer(hidden, heads, 2 * hidden, dropout=0.1, batch_first=True)
    return _SequenceModel(nn.TransformerEncoder(layer, layers, enable_nested_tensor=False), hidden, vocab)


def MLP20(width: int = 64, depth: int = 20):
    """The H200 calibration's host-bound step: 20 × Linear(64, 64) + ReLU (configs/catalog/gpu_kernels_h200.csv,
    'launch' rows)."""
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers)
