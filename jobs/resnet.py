"""A small ResNet (residual blocks with BatchNorm) on the digits upsampled to 1×32×32: the
"larger model" of the built-in jobs, for the estimator and GPU runs.

    python -m jobs.resnet --epochs 5 --batch-size 64
"""
from __future__ import annotations

from functools import partial

from torch import nn

from jobs.data import digit_images
from jobs.run import run_job
from jobs.train import Job


class BasicBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int = 1):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(out_ch), nn.ReLU(inplace=True),
            nn.Conv2d(out_ch, out_ch, 3, padding=1, bias=False), nn.BatchNorm2d(out_ch),
        )
        self.shortcut = nn.Identity()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(out_ch))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.body(x) + self.shortcut(x))


class ResNetSmall(nn.Module):
    def __init__(self, num_classes: int = 10, in_channels: int = 1,
                 widths: tuple[int, ...] = (16, 32, 64)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True))
        blocks, prev = [], widths[0]
        for i, width in enumerate(widths):
            blocks.append(BasicBlock(prev, width, stride=1 if i == 0 else 2))
            prev = width
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(prev, num_classes))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


JOB = Job(name="resnet", module="jobs.resnet", build_model=ResNetSmall,
          load_data=partial(digit_images, 32), epochs=5, batch_size=64, lr=2e-3)


def main(argv: list[str] | None = None) -> dict:
    return run_job(JOB, argv)


if __name__ == "__main__":
    main()
