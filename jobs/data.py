"""scikit-learn's handwritten digits (shipped inside the package: no download) with a fixed split.

1797 8×8 images of the digits 0-9; a stratified 80/20 split with a fixed seed gives 1437 training
and 360 held-out images. Pixel values (0-16) are scaled to [0, 1].
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

SPLIT_SEED = 0  # the held-out split never changes with the training seed
TEST_FRACTION = 0.2


@dataclass(frozen=True)
class Split:
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor


@lru_cache(maxsize=1)
def _digits_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    pixels, target = load_digits(return_X_y=True)  # the images flattened: (1797, 64)
    images = (pixels.reshape(-1, 8, 8) / 16.0).astype(np.float32)
    labels = target.astype(np.int64)
    parts = train_test_split(images, labels, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=labels)
    train_x, test_x, train_y, test_y = (np.asarray(p) for p in parts)  # arrays in, arrays out (typed as lists too)
    return train_x, test_x, train_y, test_y


def _split(transform) -> Split:
    train_x, test_x, train_y, test_y = _digits_arrays()
    return Split(transform(torch.from_numpy(train_x)), torch.from_numpy(train_y),
                 transform(torch.from_numpy(test_x)), torch.from_numpy(test_y))


def digit_images(size: int = 8) -> Split:
    """Images shaped (N, 1, size, size); other sizes than 8 are resized bilinearly."""
    def to_images(x: torch.Tensor) -> torch.Tensor:
        x = x.unsqueeze(1)
        if size != 8:
            x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear",
                                                align_corners=False)
        return x.contiguous()
    return _split(to_images)


def digit_sequences() -> Split:
    """Each image as a sequence of its 8 rows: (N, 8 time steps, 8 features)."""
    return _split(lambda x: x.contiguous())
