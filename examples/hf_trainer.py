"""Hugging Face ``Trainer`` on a ``StreamingDataset``, tokenizing on the fly, padded by a collator.

    python examples/hf_trainer.py [--workdir DIR] [--steps N]

1. Writes a small MDS dataset of text lines (runs of consecutive "words", so that a tiny
   language model can learn them).
2. Builds a word-level tokenizer with the ``tokenizers`` package and a two-layer GPT-2 from a
   ``GPT2Config``: nothing is downloaded.
3. ``TokenizedStream`` is a ``StreamingDataset`` (a torch ``IterableDataset``) whose samples are
   tokenized as they are read; ``DataCollatorForLanguageModeling`` pads each batch and makes
   the labels; ``transformers.Trainer`` trains for one epoch with two DataLoader workers.
4. Checks that the trainer ran every step and that the loss fell.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from typing import Any

import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    DataCollatorForLanguageModeling,
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
)

from streaming import MDSWriter, StreamingDataset

WORDS = [f'w{i}' for i in range(24)]
NUM_SAMPLES = 512
BATCH = 16


def write_dataset(out: str) -> None:
    rng = np.random.default_rng(0)
    with MDSWriter(out=out, columns={'text': 'str'}, size_limit='8kb') as writer:
        for _ in range(NUM_SAMPLES):
            start, length = int(rng.integers(len(WORDS))), int(rng.integers(6, 20))
            writer.write({'text': ' '.join(WORDS[(start + k) % len(WORDS)]
                                           for k in range(length))})


def make_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {word: i for i, word in enumerate(['[PAD]', '[UNK]', *WORDS])}
    core = Tokenizer(models.WordLevel(vocab, unk_token='[UNK]'))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token='[PAD]', unk_token='[UNK]')


class TokenizedStream(StreamingDataset):
    """Text samples, tokenized as they are read (in the DataLoader workers)."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast, max_length: int,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tokenizer, self.max_length = tokenizer, max_length

    def __getitem__(self, idx: int) -> dict[str, Any]:
        text = super().__getitem__(idx)['text']
        return self.tokenizer(text, truncation=True, max_length=self.max_length)


def run(workdir: str, steps: int | None = None) -> list[float]:
    remote, cache = os.path.join(workdir, 'data'), os.path.join(workdir, 'cache')
    write_dataset(remote)
    tokenizer = make_tokenizer()
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=32, n_embd=32,
                                       n_layer=2, n_head=2, pad_token_id=tokenizer.pad_token_id))
    dataset = TokenizedStream(tokenizer, max_length=32, remote=remote, local=cache,
                              batch_size=BATCH, shuffle=True)
    steps = steps or math.ceil(len(dataset) / BATCH)  # one epoch
    args = TrainingArguments(output_dir=os.path.join(workdir, 'out'), max_steps=steps,
                             per_device_train_batch_size=BATCH, learning_rate=1e-2,
                             logging_steps=1, save_strategy='no', report_to=[], use_cpu=True,
                             dataloader_num_workers=2, disable_tqdm=True, seed=0)
    collator = DataCollatorForLanguageModeling(tokenizer=tokenizer, mlm=False)
    trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=collator)
    trainer.train()
    losses = [entry['loss'] for entry in trainer.state.log_history if 'loss' in entry]
    assert trainer.state.global_step == steps, (trainer.state.global_step, steps)
    assert all(math.isfinite(loss) for loss in losses), losses
    first, last = np.mean(losses[:3]), np.mean(losses[-3:])
    assert last < 0.7 * first, f'the loss did not fall: {first:.3f} -> {last:.3f}'
    print(f'OK: {steps} steps of {BATCH} streamed, tokenized, padded samples; '
          f'loss {first:.3f} -> {last:.3f}')
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--workdir', help='where data, cache and outputs go (default: temp)')
    parser.add_argument('--steps', type=int, help='training steps (default: one epoch)')
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix='streaming-hf-') as tmp:
        run(args.workdir or tmp, args.steps)


if __name__ == '__main__':
    main()
