"""A local dataset tokenized once: token ids cached on disk, keyed by what made them.

The key is a hash of the data file's bytes, the tokenizer (its serialized form when it has
one, else its class, name and vocabulary size) and the JSONL text field, so a changed file
or another tokenizer never reads a stale cache. The cache is one int32 tensor of shape
(n_tokens,): every document's ids followed by the end-of-text id, in file order. Written to
a temporary name and renamed, so ranks tokenizing at the same time never read half a file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from engine.trainer.workloads.workload import WorkloadError

log = logging.getLogger(__name__)

DOCS_PER_CALL = 1000
"""Documents handed to the tokenizer at once (fast tokenizers batch them in Rust)."""


def load_tokens(data: Path, tokenizer: Any, text_key: str, cache_dir: Path) -> torch.Tensor:
    """The packed token ids of ``data`` (int32, shape (n,)), from the cache when it has them."""
    if not data.is_file():
        raise WorkloadError(f"hf.data {data}: no such file")
    cached = cache_dir / f"{cache_key(data, tokenizer, text_key)}.pt"
    if cached.is_file():
        return torch.load(cached, weights_only=True)
    tokens = tokenize(data, tokenizer, text_key)
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
    torch.save(tokens, partial)
    os.replace(partial, cached)
    log.info("tokenized %s: %d tokens, cached in %s", data, len(tokens), cached)
    return tokens


def cache_key(data: Path, tokenizer: Any, text_key: str) -> str:
    digest = hashlib.sha256()
    with data.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    digest.update(tokenizer_fingerprint(tokenizer).encode())
    digest.update(f"\0{text_key}\0{data.suffix}".encode())
    return digest.hexdigest()[:24]


def tokenizer_fingerprint(tokenizer: Any) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return hashlib.sha256(backend.to_str().encode()).hexdigest()
    name = getattr(tokenizer, "name_or_path", "")
    return f"{type(tokenizer).__name__}:{name}:{len(tokenizer)}"


def tokenize(data: Path, tokenizer: Any, text_key: str) -> torch.Tensor:
    eos = tokenizer.eos_token_id
    if eos is None:
        log.warning("the tokenizer has no end-of-text token: documents are packed without a separator")
    ids: list[int] = []
    batch: list[str] = []
    for text in documents(data, text_key):
        batch.append(text)
        if len(batch) == DOCS_PER_CALL:
            _extend(ids, tokenizer(batch, add_special_tokens=False)["input_ids"], eos)
            batch = []
    if batch:
        _extend(ids, tokenizer(batch, add_special_tokens=False)["input_ids"], eos)
    if not ids:
        raise WorkloadError(f"hf.data {data}: no text in it")
    return torch.tensor(ids, dtype=torch.int32)


def documents(data: Path, text_key: str) -> Iterator[str]:
    """``.jsonl``: each non-empty line's ``text_key``; anything else: the whole file."""
    if data.suffix != ".jsonl":
        yield data.read_text(encoding="utf-8", errors="replace")
        return
    with data.open(encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                text = json.loads(line)[text_key]
            except (ValueError, TypeError, KeyError):
                raise WorkloadError(
                    f"hf.data {data}:{number}: not a JSON object with a {text_key!r} string"
                ) from None
            if not isinstance(text, str):
                raise WorkloadError(f"hf.data {data}:{number}: {text_key!r} is not a string")
            yield text


def _extend(ids: list[int], tokenized: list[list[int]], eos: int | None) -> None:
    for doc in tokenized:
        ids.extend(doc)
        if eos is not None:
            ids.append(eos)
