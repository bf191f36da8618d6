"""A small BERT built from config.json (random weights) trained on token ids made here, nothing
downloaded; the task (predict each token of its own input) stands in for a real corpus. Reports each
epoch through jobs.metrics like any own script."""
import argparse
import time

import torch
from transformers import AutoConfig, AutoModelForMaskedLM

from jobs.metrics import report, report_result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--samples", type=int, default=2048)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)

    config = AutoConfig.from_pretrained(".")  # this directory's config.json
    model = AutoModelForMaskedLM.from_config(config)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ids = torch.randint(1, config.vocab_size, (args.samples, args.seq_len))

    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        model.train()
        for i in range(0, args.samples, args.batch_size):
            batch = ids[i:i + args.batch_size]
            loss = model(input_ids=batch, labels=batch).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
        seconds = time.perf_counter() - t0
        report(epoch=epoch, epochs=args.epochs, loss=round(loss.item(), 4),
               samples_per_s=round(args.samples / seconds, 1))
    report_result(loss=round(loss.item(), 4))


if __name__ == "__main__":
    main()
