"""Trains a small CNN on scikit-learn's bundled handwritten digits (8x8, 10 classes).

    python examples/digits/train_cnn.py                  # on neuron
    python examples/digits/train_cnn.py --device cpu

Conv -> BatchNorm -> ReLU -> max pool, twice, then a linear classifier; Adam on
mini-batches; prints the test accuracy after each epoch.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from tqdm import tqdm


@dataclass
class CNNConfig:
    """Everything a run depends on; the command-line flags mirror these fields."""

    device: str = "neuron"
    epochs: int = 8
    batch_size: int = 64
    lr: float = 3e-3
    channels: int = 16
    test_fraction: float = 0.25
    seed: int = 0
    progress: bool = True


@dataclass
class CNNResult:
    """Per-epoch mean training loss and test accuracy (fraction correct)."""

    losses: List[float] = field(default_factory=list)
    accuracies: List[float] = field(default_factory=list)


class DigitsCNN(nn.Module):
    """Two conv blocks (8x8 -> 4x4 -> 2x2) and a linear layer over the 10 classes."""

    def __init__(self, channels: int = 16):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(channels, 2 * channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(2 * channels),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Linear(2 * channels * 2 * 2, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).flatten(1))


def load_data(test_fraction: float, seed: int) -> Tuple[torch.Tensor, ...]:
    """(x_train, y_train, x_test, y_test) as CPU tensors; images (N, 1, 8, 8) scaled to
    [0, 1], split stratified by class."""
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(images, labels, test_size=test_fraction, random_state=seed,
                                              stratify=labels)
    return x_tr, y_tr, x_te, y_te


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of `x` that `model` (in eval mode) classifies as `y`."""
    model.eval()
    correct = (model(x).argmax(dim=1) == y).sum().item()
    model.train()
    return correct / len(y)


def train(config: CNNConfig) -> CNNResult:
    """Trains from `config.seed` and returns the per-epoch losses and test accuracies."""
    device = torch.device(config.device)
    torch.manual_seed(config.seed)
    x_tr, y_tr, x_te, y_te = load_data(config.test_fraction, config.seed)
    x_tr, y_tr, x_te, y_te = (t.to(device) for t in (x_tr, y_tr, x_te, y_te))
    model = DigitsCNN(config.channels).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    shuffle = torch.Generator().manual_seed(config.seed)

    result = CNNResult()
    for epoch in tqdm(range(1, config.epochs + 1), unit="epoch", disable=not config.progress):
        # Shuffled on the CPU so every device sees the same batches.
        order = torch.randperm(len(y_tr), generator=shuffle).to(device)
        total = torch.zeros((), device=device)
        for start in range(0, len(order), config.batch_size):
            idx = order[start: start + config.batch_size]
            loss = F.cross_entropy(model(x_tr[idx]), y_tr[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += loss.detach() * len(idx)
        result.losses.append(total.item() / len(order))
        result.accuracies.append(accuracy(model, x_te, y_te))
        tqdm.write(f"epoch {epoch}: loss {result.losses[-1]:.4f}, test accuracy {result.accuracies[-1]:.2%}")
    return result


def parse_args(argv: Optional[List[str]] = None) -> CNNConfig:
    """The command line as a `CNNConfig`."""
    d = CNNConfig()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default=d.device, help="neuron or cpu (default %(default)s)")
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--channels", type=int, default=d.channels, help="channels of the first conv layer")
    p.add_argument("--test-fraction", type=float, default=d.test_fraction)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    return CNNConfig(**vars(p.parse_args(argv)))


def main(argv: Optional[List[str]] = None) -> None:
    config = parse_args(argv)
    result = train(config)
    print(f"test accuracy {result.accuracies[-1]:.2%} after {config.epochs} epochs on {config.device}")


if __name__ == "__main__":
    main()
