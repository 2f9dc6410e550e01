"""The built-in training text: the Python standard library's own ``.py`` files, as bytes.

Every machine that runs the trainer has this corpus, so the demo needs no download. Bytes
are the tokens (vocabulary 256). Batches are a pure function of (seed, step, micro), so a
resumed run sees exactly the data an uninterrupted run would have seen at that step.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.trainer.workloads.sequence_growth import SequenceGrowth

CORPUS_CAP_BYTES = 8 << 20  # 8 MiB: reading it takes ~0.1 s, plenty for a byte-level demo
HELDOUT_FRACTION = 0.02  # the last 2% of the bytes are held out for an eval loss
_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idlelib", "__pycache__"}


def stdlib_sources(root: Path | None = None) -> list[Path]:
    """The ``.py`` files under the stdlib directory, in a stable (sorted) order."""
    root = root or Path(sysconfig.get_paths()["stdlib"])
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        found.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py"))
    return found


def read_corpus(cap_bytes: int = CORPUS_CAP_BYTES, root: Path | None = None) -> torch.Tensor:
    """Concatenated source bytes, at most ``cap_bytes``, as a uint8 tensor of shape (n,)."""
    chunks: list[bytes] = []
    total = 0
    for path in stdlib_sources(root):
        try:
            data = path.read_bytes()
        except OSError:
            continue  # an unreadable file is just not part of the corpus
        chunks.append(data[: cap_bytes - total])
        total += len(chunks[-1])
        if total >= cap_bytes:
            break
    if total == 0:
        raise RuntimeError(f"no .py files found under {root or sysconfig.get_paths()['stdlib']}")
    return torch.frombuffer(bytearray(b"".join(chunks)), dtype=torch.uint8)


def batch_seed(seed: int, step: int, micro: int, split: str = "train") -> int:
    """A 63-bit generator seed from (seed, step, micro, split): stable across processes."""
    digest = hashlib.blake2b(f"{split}:{seed}:{step}:{micro}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


@dataclass(frozen=True)
class ByteCorpus:
    """Train and held-out byte streams plus the deterministic batch sampler."""

    train: torch.Tensor
    """uint8, shape (n_train,)."""
    heldout: torch.Tensor
    """uint8, shape (n_heldout,)."""
    seq_len: int
    seed: int
    growth: SequenceGrowth | None = None
    """Training sequences shorter than ``seq_len`` early in the run (None: always seq_len)."""

    @classmethod
    def load(
        cls, seq_len: int, seed: int, cap_bytes: int = CORPUS_CAP_BYTES, growth: SequenceGrowth | None = None
    ) -> ByteCorpus:
        data = read_corpus(cap_bytes)
        split = int(len(data) * (1.0 - HELDOUT_FRACTION))
        if split <= seq_len + 1 or len(data) - split <= seq_len + 1:
            raise RuntimeError(f"corpus of {len(data)} bytes is too small for seq_len {seq_len}")
        return cls(train=data[:split], heldout=data[split:], seq_len=seq_len, seed=seed, growth=growth)

    def seq_len_at(self, step: int) -> int:
        """Tokens per training sample in optimizer step ``step``."""
        return self.seq_len if self.growth is None else self.growth.at(step)

    def batch(self, step: int, micro: int, micro_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, y), both int64 of shape (micro_batch, seq_len_at(step)); y is x shifted left by one."""
        return self._draw(self.train, batch_seed(self.seed, step, micro), micro_batch, self.seq_len_at(step))

    def lengths(self, step: int, micro: int, micro_batch: int) -> torch.Tensor:
        """Tokens each sample of ``batch(step, micro, micro_batch)`` trains (the contract's
        ``Workload.lengths``): all the step's length."""
        return torch.full((micro_batch,), self.seq_len_at(step), dtype=torch.int64)

    def heldout_batch(self, index: int, micro_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A held-out (x, y) pair of ``seq_len`` tokens, deterministic in ``index``."""
        return self._draw(self.heldout, batch_seed(self.seed, index, 0, "heldout"), micro_batch, self.seq_len)

    def _draw(
        self, data: torch.Tensor, seed: int, micro_batch: int, length: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)
        starts = torch.randint(0, len(data) - length - 1, (micro_batch,), generator=gen)
        offsets = torch.arange(length + 1)
        window = data[starts[:, None] + offsets].long()  # (micro_batch, length + 1)
        return window[:, :-1], window[:, 1:]
