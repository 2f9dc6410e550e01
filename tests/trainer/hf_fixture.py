"""A tiny Hugging Face causal LM (GPT-2 shape, random weights) and its tokenizer, built from
a config into a directory, and a small JSONL dataset: no download."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

EOS = "<|endoftext|>"


def sample_texts(count: int = 400) -> list[str]:
    """Paragraphs of the standard library's own source: text every machine has."""
    source = (Path(sysconfig.get_paths()["stdlib"]) / "argparse.py").read_text(encoding="utf-8")
    paragraphs = [p.strip() for p in source.split("\n\n") if len(p.strip()) > 40]
    return paragraphs[:count]


def write_jsonl(path: Path, texts: list[str], key: str = "text") -> Path:
    path.write_text("".join(json.dumps({key: t}) + "\n" for t in texts), encoding="utf-8")
    return path


def make_model_dir(directory: Path, *, weights: bool, seq_len: int = 64) -> Path:
    """config.json + tokenizer files (+ model.safetensors when ``weights``)."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    directory.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(sample_texts(), trainer)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=EOS)
    tokenizer.save_pretrained(directory)
    eos = tokenizer.eos_token_id
    config = transformers.GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=seq_len,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=eos,
        eos_token_id=eos,
    )
    if weights:
        transformers.GPT2LMHeadModel(config).save_pretrained(directory)
    else:
        config.save_pretrained(directory)
    return directory
