"""A stacked LSTM classifier reading each digit image as a sequence: 8 time steps (the rows) of 8
features (the pixels of a row). The LSTM runs over the time steps; the class comes from the top
layer's hidden state after the last step.

    python -m jobs.lstm --epochs 20 --batch-size 64
"""
from __future__ import annotations

from torch import nn

from jobs.data import digit_sequences
from jobs.run import run_job
from jobs.train import Job


class StackedLSTM(nn.Module):
    def __init__(self, num_classes: int = 10, input_size: int = 8, hidden_size: int = 64,
                 num_layers: int = 2, dropout: float = 0.1):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers=num_layers, batch_first=True,
                            dropout=dropout if num_layers > 1 else 0.0)
        self.head = nn.Linear(hidden_size, num_classes)

    def forward(self, x):  # x: (batch, time, features)
        _, (h_n, _) = self.lstm(x)  # h_n: (num_layers, batch, hidden), after the last step
        return self.head(h_n[-1])


JOB = Job(name="lstm", module="jobs.lstm", build_model=StackedLSTM, load_data=digit_sequences,
          epochs=20, batch_size=64, lr=3e-3)


def main(argv: list[str] | None = None) -> dict:
    return run_job(JOB, argv)


if __name__ == "__main__":
    main()
