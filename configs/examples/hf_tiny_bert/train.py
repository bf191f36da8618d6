"""A Hugging Face Trainer script as its author wrote it: nothing dlrun-specific in it.

A tiny BERT built from a config (no weights downloaded: the job file sets HF_HUB_OFFLINE=1) learns
to classify random token sequences by their first token, on data made here. It prints what the
Trainer prints: its tqdm bar over all steps and its log dicts (`{'loss': '0.69', 'learning_rate':
..., 'epoch': '0.5'}`). dlrun reads them from its output (jobs/tee.py).
"""
import argparse

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, length: int, vocab: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)
        self.labels = (self.ids[:, 0] >= vocab // 2).long()

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=float, default=3)
    p.add_argument("--samples", type=int, default=8192)
    p.add_argument("--output-dir", default="hf-output")
    args = p.parse_args()
    torch.set_num_threads(1)
    config = BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=64, num_labels=2)
    model = BertForSequenceClassification(config)
    training = TrainingArguments(output_dir=args.output_dir, num_train_epochs=args.epochs,
                                 per_device_train_batch_size=16, learning_rate=5e-4, logging_steps=50,
                                 eval_strategy="epoch", save_strategy="no", report_to=[], use_cpu=True,
                                 dataloader_num_workers=0, seed=0)
    trainer = Trainer(model=model, args=training, train_dataset=Tokens(args.samples, 32, 512, 0),
                      eval_dataset=Tokens(256, 32, 512, 1))
    trainer.train()


if __name__ == "__main__":
    main()
