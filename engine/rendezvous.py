"""The rendezvous id the nodes of a run meet under, when ``train.rdzv_id`` does not name one.

torchrun's agents meet only under the same id at the same endpoint. The id used to be the
run's name, so two hosts started with ``--name exp-a`` and ``--name exp-b`` waited for each
other for ever. The default is now derived from what the nodes must agree on anyway: the
training content of the config (model, data, batch geometry, optimizer, steps, seed, node
count) and the endpoint. A run's name, this node's rank and the paths of this host (workload
directory, Hugging Face files) are left out. Torch-free.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from engine.config.run_config import RunConfig

DERIVED_PREFIX = "memtui-"
"""Derived ids start with this; 12 hex digits of a sha256 follow."""
SHARED_KEYS = ("preset", "steps", "seed", "model", "train", "workload", "deepspeed_config")
"""Top-level config keys every node of a run has the same (``train`` less ``NODE_OWN``)."""
NODE_OWN = ("node_rank", "rdzv_id", "rdzv_timeout_s")
"""``train`` keys that may differ from node to node (or that name the id themselves)."""


def rendezvous_id(config: RunConfig) -> str:
    """``train.rdzv_id`` when the config sets one, else the id derived from the config."""
    return config.train.rdzv_id or derived_rendezvous_id(config)


def derived_rendezvous_id(config: RunConfig) -> str:
    """``memtui-`` and 12 hex digits of the sha256 of the shared training content (with the
    endpoint, part of ``train``): equal on hosts that run the same config, whatever their
    run names."""
    doc: dict[str, Any] = config.model_dump(mode="json", include=set(SHARED_KEYS))
    doc["train"] = {k: v for k, v in doc["train"].items() if k not in NODE_OWN}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return DERIVED_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:12]
