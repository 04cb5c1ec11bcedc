"""A model folder's files, read without torch: the names, the model card and the content hash.

    model.pt     torch state dict (read by ``rl.model``, which needs torch)
    model.json   the model card (``rl.model`` lists its keys)
    model.onnx   the actor with the observation normaliser inside (``rl.onnx_export`` writes it,
                 ``rl.onnx_actor`` serves it with ONNX Runtime)

The serving path (``rl.onnx_actor``, the engine) reads the card and hashes the files through this
module alone, so it never imports torch.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

MODEL_FILE = "model.pt"
CARD_FILE = "model.json"
ONNX_FILE = "model.onnx"
CARD_FORMAT = 1
CARD_KEYS = ("format", "scenario", "overrides", "span", "episode_hours", "seed", "action_mode", "config",
             "observation", "normalizer", "code_version", "training", "created", "model_sha256")
OPTIONAL_CARD_KEYS = ("action_dimensions", "action_hold_s", "warmup_hours", "warmup_score", "typical_pods",
                      "sibling_spread")
"""Keys added after models were shipped: a card without them reads as before (``action_dimensions``:
the action mode's, ``rl.actions.card_action_dimensions``; ``action_hold_s``: 0, an action per decision,
``rl.actions.card_action_hold``; ``warmup_hours`` and ``warmup_score``: the training episodes' warm-up,
none; ``typical_pods``: the training scenario's typical pods per pool, which a model with a
fragmentation share scores with outside the simulator, ``card_typical_pods``; ``sibling_spread``: the
sibling spread every decision's score takes (``policy.siblings``), 0, ``card_sibling_spread``)."""


class ModelError(ValueError):
    """A model folder that cannot be used, with the file and what was expected."""


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it over ``path``: a reader
    sees the old file or the new one, never a partial one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def read_card(folder: Path) -> dict:
    """The model card of ``folder``, with every key present and the known format (``ModelError``)."""
    path = Path(folder) / CARD_FILE
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelError(f"{path}: missing: expected the model card written with {MODEL_FILE}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{path}: not a JSON model card ({exc})") from None
    if not isinstance(card, dict):
        raise ModelError(f"{path}: expected a JSON object, got {type(card).__name__}")
    missing = [k for k in CARD_KEYS if k not in card]
    if missing:
        raise ModelError(f"{path}: missing keys {missing}: expected {', '.join(CARD_KEYS)}")
    if card["format"] != CARD_FORMAT:
        raise ModelError(f"{path}: format {card['format']!r}: expected {CARD_FORMAT}")
    from td3sched.rl.actions import card_action_dimensions, card_action_hold

    try:
        card_action_dimensions(card)
        card_action_hold(card)
        card_typical_pods(card)
        card_sibling_spread(card)
    except ValueError as exc:
        raise ModelError(f"{path}: {exc}") from None
    return card


def card_sibling_spread(card: dict) -> float:
    """The sibling spread a model card fixes (``sibling_spread``; none: 0), as a float; ValueError when bad."""
    from td3sched.policy.siblings import validate_spread

    spread = card.get("sibling_spread")
    return 0.0 if spread is None else validate_spread(spread)


def card_typical_pods(card: dict):
    """(pool names, ``metrics.fragmentation.PoolTypicalPods``) of a card's ``typical_pods``: the typical
    pods per pool of the scenario the model trained on, which its fragmentation share is scored with
    (``td3sched train`` writes them for such a model); None when the card has none. ValueError when
    malformed."""
    data = card.get("typical_pods")
    if data is None:
        return None
    from td3sched.metrics.fragmentation import typical_pods_from_json

    return typical_pods_from_json(data)


def content_sha256(card_bytes: bytes, state_bytes: bytes) -> str:
    """sha256 of everything a model is made of: the card (config, normaliser, action mode) and the
    state dict; a change to either is another model."""
    content = hashlib.sha256()
    for name, blob in ((CARD_FILE, card_bytes), (MODEL_FILE, state_bytes)):
        content.update(f"{name}\0{len(blob)}\0".encode() + blob)
    return content.hexdigest()


def folder_content_sha256(folder: Path) -> tuple[dict, str]:
    """(card, content sha256) of a model folder; the state dict must be the one the card names."""
    folder = Path(folder)
    if folder.is_file():
        raise ModelError(f"model folder {folder}: is a file: expected the model's folder, holding {MODEL_FILE} and "
                         f"{CARD_FILE} (e.g. runs/NAME, not runs/NAME/{folder.name})")
    if not folder.is_dir():
        raise ModelError(f"model folder {folder}: not found: expected a folder holding {MODEL_FILE} and "
                         f"{CARD_FILE} (written by td3sched train)")
    card = read_card(folder)
    return card, content_sha256((folder / CARD_FILE).read_bytes(), read_state_bytes(folder, card))


def read_state_bytes(folder: Path, card: dict) -> bytes:
    """The bytes of the folder's state dict, refused unless they are the ones ``card`` names."""
    model_path = Path(folder) / MODEL_FILE
    try:
        data = model_path.read_bytes()
    except FileNotFoundError:
        raise ModelError(f"{model_path}: missing: expected the state dict described by {CARD_FILE}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != card["model_sha256"]:
        raise ModelError(f"{model_path}: sha256 {digest[:16]}... differs from the card's "
                         f"{str(card['model_sha256'])[:16]}...: the file is corrupt or not the one the card describes")
    return data
