"""Models for bench/estimator_gpu.py, built from code or configs (no weights, no downloads): torch only.

Named in workloads as bench.gpu_models:NAME. Two suites: the loops the H200 measurement of issue 33 ran
(ResNet-50, BERT, LSTM, GPT-2, the course CNN: the estimator was corrected against them) and others it was not
(VGG-11, MobileNetV2, ViT, a GRU, T5, ConvNeXt), which judge it.
"""
from __future__ import annotations

import torch.nn as nn


def _bn_conv(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: type = nn.ReLU) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout),
                         act())


class _Bottleneck(nn.Module):
    def __init__(self, cin: int, mid: int, stride: int):
        super().__init__()
        cout = mid * 4
        self.body = nn.Sequential(_bn_conv(cin, mid, 1), _bn_conv(mid, mid, 3, stride),
                                  nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.body(x) + self.skip(x))


def ResNet50(num_classes: int = 1000) -> nn.Module:
    layers: list[nn.Module] = [_bn_conv(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for mid, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(_Bottleneck(cin, mid, stride if i == 0 else 1))
            cin = mid * 4
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes))


def VGG11(num_classes: int = 1000) -> nn.Module:
    layers: list[nn.Module] = []
    cin = 3
    for v in (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"):
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(cin, int(v), 3, padding=1), nn.ReLU()]
            cin = int(v)
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Dropout(),
                         nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(), nn.Linear(4096, num_classes))


class _InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        mid = cin * expand
        self.use_skip = stride == 1 and cin == cout
        parts = [_bn_conv(cin, mid, 1, act=nn.ReLU6)] if expand != 1 else []
        parts += [_bn_conv(mid, mid, 3, stride, groups=mid, act=nn.ReLU6), nn.Conv2d(mid, cout, 1, bias=False),
                  nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*parts)

    def forward(self, x):
        return x + self.body(x) if self.use_skip else self.body(x)


def MobileNetV2(num_classes: int = 1000) -> nn.Module:
    layers: list[nn.Module] = [_bn_conv(3, 32, 3, 2, act=nn.ReLU6)]
    cin = 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)):
        for i in range(n):
            layers.append(_InvertedResidual(cin, c, s if i == 0 else 1, t))
            cin = c
    return nn.Sequential(*layers, _bn_conv(cin, 1280, 1, act=nn.ReLU6), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(1280, num_classes))


class _ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        return x + self.mlp(self.norm(y)).permute(0, 3, 1, 2)


def ConvNeXtTiny(num_classes: int = 1000) -> nn.Module:
    dims, depths = (96, 192, 384, 768), (3, 3, 9, 3)
    layers: list[nn.Module] = [nn.Conv2d(3, dims[0], 4, 4)]
    for i, (dim, depth) in enumerate(zip(dims, depths)):
        if i:
            layers.append(nn.Conv2d(dims[i - 1], dim, 2, 2))
        layers += [_ConvNeXtBlock(dim) for _ in range(depth)]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(dims[-1], num_classes))


class _Recurrent(nn.Module):
    def __init__(self, cell: type, vocab: int, hidden: int, layers: int, num_classes: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.rnn = cell(hidden, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, tokens):
        out, _ = self.rnn(self.embed(tokens))
        return self.head(out[:, -1])


def LSTMClassifier(vocab: int = 10000, hidden: int = 1024, layers: int = 2, num_classes: int = 10) -> nn.Module:
    return _Recurrent(nn.LSTM, vocab, hidden, layers, num_classes)


def GRUClassifier(vocab: int = 10000, hidden: int = 768, layers: int = 2, num_classes: int = 10) -> nn.Module:
    return _Recurrent(nn.GRU, vocab, hidden, layers, num_classes)


class _ViT(nn.Module):
    def __init__(self, dim: int, depth: int, heads: int, patch: int, image: int, num_classes: int):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        return self.head(self.encoder(tokens).mean(1))


def ViTSmall(num_classes: int = 1000) -> nn.Module:
    return _ViT(384, 12, 6, 16, 224, num_classes)
