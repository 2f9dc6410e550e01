"""One document per sample: a Hugging Face dataset with packing off (``hf.packing = false``).

The tokenized dataset (one stream, an end-of-text id after each document) is cut back into
its documents at those ids. Each sample of ``(step, micro)`` is one document drawn at random
(a pure function of (seed, step, micro), as the packed sampler's windows are), its first
``seq_len + 1`` tokens: x all but the last, y the same shifted left by one. A micro-batch is
padded on the right to its longest sample: x with the pad token, y with -100, which the
loss's cross-entropy ignores. With causal attention a real token attends only to earlier
positions, so right padding changes no real token's logits and needs no attention mask.
The last documents (a fraction given by the workload) are held out for an eval loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.trainer.workloads.corpus import batch_seed
from engine.trainer.workloads.workload import WorkloadError

IGNORE_INDEX = -100
"""A label the loss leaves out (``F.cross_entropy``'s default ``ignore_index``)."""


@dataclass(frozen=True)
class DocumentCorpus:
    tokens: torch.Tensor
    """int32, shape (n,): every document's ids, each followed by the end-of-text id."""
    starts: torch.Tensor
    """int64, shape (documents,): where each document starts in ``tokens``."""
    sizes: torch.Tensor
    """int64, shape (documents,): each document's tokens, its end-of-text included (>= 2)."""
    split: int
    """Documents ``[0, split)`` train; the rest are held out."""
    seq_len: int
    seed: int
    pad_id: int
    """Token id that fills x after a shorter document."""

    @classmethod
    def of(
        cls, tokens: torch.Tensor, eos: int, seq_len: int, seed: int, pad_id: int, heldout_fraction: float
    ) -> DocumentCorpus:
        """Documents of ``tokens`` cut after each ``eos``; ones of one token (nothing to
        predict) are left out."""
        ends = (tokens == eos).nonzero().flatten() + 1  # one past each document's end-of-text
        if len(ends) == 0 or int(ends[-1]) < len(tokens):
            ends = torch.cat([ends, torch.tensor([len(tokens)])])  # a last document without one
        starts = torch.cat([torch.zeros(1, dtype=torch.int64), ends[:-1]])
        sizes = ends - starts
        keep = sizes >= 2
        starts, sizes = starts[keep], sizes[keep]
        split = int(len(sizes) * (1.0 - heldout_fraction))
        if split < 1 or len(sizes) - split < 1:
            raise WorkloadError(
                f"hf.packing = false: {len(sizes)} documents are too few to train on and hold some out"
            )
        return cls(tokens, starts, sizes, split, seq_len, seed, pad_id)

    def batch(self, step: int, micro: int, micro_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, y), int64 of shape (micro_batch, the longest sample's tokens)."""
        return self._build(self._training_docs(step, micro, micro_batch))

    def lengths(self, step: int, micro: int, micro_batch: int) -> torch.Tensor:
        """Tokens each sample of ``batch(step, micro, micro_batch)`` trains, without building it."""
        return self._trained(self._training_docs(step, micro, micro_batch))

    def heldout_batch(self, index: int, micro_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Held-out documents as an (x, y) pair, deterministic in ``index``."""
        gen = torch.Generator().manual_seed(batch_seed(self.seed, index, 0, "heldout"))
        return self._build(torch.randint(self.split, len(self.sizes), (micro_batch,), generator=gen))

    def _training_docs(self, step: int, micro: int, micro_batch: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(batch_seed(self.seed, step, micro))
        return torch.randint(0, self.split, (micro_batch,), generator=gen)

    def _trained(self, docs: torch.Tensor) -> torch.Tensor:
        """Tokens trained per document: its size less one (the last predicts nothing), at most seq_len."""
        return (self.sizes[docs] - 1).clamp(max=self.seq_len)

    def _build(self, docs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        trained = self._trained(docs)
        width = int(trained.max())
        x = torch.full((len(docs), width), self.pad_id, dtype=torch.int64)
        y = torch.full((len(docs), width), IGNORE_INDEX, dtype=torch.int64)
        for row, (doc, length) in enumerate(zip(docs.tolist(), trained.tolist(), strict=True)):
            start = int(self.starts[doc])
            sample = self.tokens[start : start + length + 1].long()
            x[row, :length] = sample[:-1]
            y[row, :length] = sample[1:]
        return x, y
