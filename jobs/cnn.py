"""The course CNN on the digits images (1×8×8): two conv+pool blocks, then two linear layers.

    python -m jobs.cnn --epochs 20 --batch-size 64
"""
from __future__ import annotations

from torch import nn

from jobs.data import digit_images
from jobs.run import run_job
from jobs.train import Job


class SimpleCNN(nn.Module):
    def __init__(self, num_classes: int = 10, in_channels: int = 1, image_size: int = 8):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        flat = 64 * (image_size // 4) ** 2
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(flat, 128), nn.ReLU(), nn.Dropout(0.2),
            nn.Linear(128, num_classes),
        )

    def forward(self, x):
        return self.classifier(self.features(x))


JOB = Job(name="cnn", module="jobs.cnn", build_model=SimpleCNN, load_data=digit_images,
          epochs=20, batch_size=64, lr=1e-3)


def main(argv: list[str] | None = None) -> dict:
    return run_job(JOB, argv)


if __name__ == "__main__":
    main()
