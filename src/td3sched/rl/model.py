"""A trained model on disk: a folder holding

    model.pt     torch state dict of the actor ("actor.*") and the critics ("critic.*")
    model.json   the model card: scenario, overrides, span, episode length, seed, action mode and the
                 action's dimensions (``rl.actions.ACTION_DIMENSIONS``), the
                 TD3 config, the observation layout and normaliser, the code version, the training
                 time and steps, and the sha256 of model.pt

``load_model`` checks everything before it builds anything: a missing, corrupt or mismatched file
(wrong keys or shapes, a card whose config, observation layout or hash disagrees) is refused with a
``ModelError`` naming the file and what was expected; a model is never half-loaded. The state dict
is read with ``torch.load(..., weights_only=True)``: no pickled code runs.
"""

from __future__ import annotations

import datetime
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from td3sched.rl.actions import ACTION_DIMENSIONS, action_size, check_action_mode
from td3sched.rl.card import (  # noqa: F401  (re-exported: the model's files and errors)
    CARD_FILE, CARD_FORMAT, CARD_KEYS, MODEL_FILE, OPTIONAL_CARD_KEYS, ModelError, content_sha256, read_card as _read_card, read_state_bytes,
    write_atomic)
from td3sched.rl.networks import Actor, Critic
from td3sched.rl.normalizer import ObservationNormalizer
from td3sched.rl.observation import OBSERVATION_FIELDS, OBSERVATION_SIZE
from td3sched.rl.td3 import TD3Config

def scenario_typical_pods(scenario: str, overrides) -> dict:
    """The card's ``typical_pods`` for a model trained on ``scenario`` with ``overrides``: its typical pods
    per pool, which the model's fragmentation share is scored with outside the simulator (``rl.card``)."""
    from td3sched.metrics.fragmentation import typical_pods_to_json
    from td3sched.scenario import load_scenario

    names, typical = load_scenario(scenario, list(overrides)).typical_pods()
    return typical_pods_to_json(typical, names)


def save_model(folder, agent, card: dict) -> None:
    """Write ``agent``'s actor, critics, normaliser and config with the card fields given
    (scenario, overrides, span, episode_hours, seed, training; missing ones are null). A model with a
    fragmentation share also gets its scenario's typical pods (``typical_pods``) unless the card gives them."""
    from td3sched.run import code_version

    folder = Path(folder)
    state = {**{f"actor.{k}": v for k, v in agent.actor.state_dict().items()},
             **{f"critic.{k}": v for k, v in agent.critic.state_dict().items()}}
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    full = {key: None for key in CARD_KEYS}
    full.update({k: v for k, v in card.items() if k in CARD_KEYS or k in OPTIONAL_CARD_KEYS})
    if agent.action_mode == "fragmentation" and full.get("typical_pods") is None and full.get("scenario"):
        full["typical_pods"] = scenario_typical_pods(full["scenario"], full.get("overrides") or [])
    full.update(
        format=CARD_FORMAT, seed=card.get("seed", agent.seed), action_mode=agent.action_mode,
        action_dimensions=list(ACTION_DIMENSIONS[agent.action_mode]),
        config=agent.config.to_json(),
        observation={"size": OBSERVATION_SIZE, "fields": list(OBSERVATION_FIELDS)},
        normalizer=agent.normalizer.to_json(), code_version=code_version(),
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        model_sha256=hashlib.sha256(data).hexdigest(),
    )
    write_atomic(folder / MODEL_FILE, data)
    write_atomic(folder / CARD_FILE, (json.dumps(full, indent=2) + "\n").encode())


@dataclass
class LoadedModel:
    """A validated model: the actor (eval mode) and critics, the normaliser and the card."""

    folder: str
    card: dict
    config: TD3Config
    action_mode: str
    normalizer: ObservationNormalizer
    actor: Actor
    critic: Critic
    content_sha256: str = ""
    """sha256 of everything the model is made of: the card (config, normaliser, action mode) and the
    state dict; a change to either is another model."""

    @property
    def action_hold_s(self) -> float:
        """Seconds an action holds (the card's ``action_hold_s``; 0: one action per decision)."""
        from td3sched.rl.actions import card_action_hold

        return card_action_hold(self.card)

    @property
    def observation_size(self) -> int:
        return OBSERVATION_SIZE

    def act(self, obs: np.ndarray) -> np.ndarray:
        """The deterministic action (no noise) for a raw observation."""
        with torch.no_grad():
            return self.actor(torch.from_numpy(self.normalizer.normalize(obs))).numpy()


def _check_state(path: Path, state, expected: dict[str, torch.Size]) -> None:
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in state.items()):
        raise ModelError(f"{path}: expected a state dict of named tensors")
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ModelError(f"{path}: keys do not match the card's config: missing {missing}, unexpected {unexpected}")
    wrong = [f"{k} {tuple(state[k].shape)} (expected {tuple(shape)})" for k, shape in expected.items()
             if state[k].shape != shape]
    if wrong:
        raise ModelError(f"{path}: tensor shapes do not match the card's config: {'; '.join(wrong)}")
    bad = [k for k, v in state.items() if not torch.isfinite(v).all()]
    if bad:
        raise ModelError(f"{path}: non-finite values in {bad}")


def load_model(folder) -> LoadedModel:
    """The model in ``folder``, fully validated (``ModelError`` otherwise). A name that is no folder
    here is looked up among the user's and the shipped models (``td3sched.shipped.model_folder``)."""
    from td3sched.shipped import MODELS_ENV, model_folder, shipped_model_names

    folder = model_folder(folder)
    if folder.is_file():
        raise ModelError(f"model folder {folder}: is a file: expected the model's folder, holding {MODEL_FILE} and "
                         f"{CARD_FILE} (e.g. runs/NAME, not runs/NAME/{folder.name})")
    if not folder.is_dir():
        raise ModelError(f"model folder {folder}: not found: expected a folder holding {MODEL_FILE} and "
                         f"{CARD_FILE} (written by td3sched train), a model in ${MODELS_ENV} (default ./models), "
                         f"or a shipped model: {', '.join(shipped_model_names())}")
    card = _read_card(folder)
    card_path = folder / CARD_FILE
    try:
        config = TD3Config.from_json(card["config"])
        action_mode = check_action_mode(card["action_mode"])
    except (TypeError, ValueError) as exc:
        raise ModelError(f"{card_path}: {exc}") from None
    fields = card["observation"].get("fields") if isinstance(card["observation"], dict) else None
    if fields != list(OBSERVATION_FIELDS):
        raise ModelError(f"{card_path}: observation layout {fields!r} differs from this code's "
                         f"{OBSERVATION_SIZE} fields ({', '.join(OBSERVATION_FIELDS)})")
    try:
        normalizer = ObservationNormalizer.from_json(card["normalizer"], OBSERVATION_SIZE)
    except (TypeError, ValueError) as exc:
        raise ModelError(f"{card_path}: {exc}") from None

    model_path = folder / MODEL_FILE
    data = read_state_bytes(folder, card)
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds on a bad file
        raise ModelError(f"{model_path}: not a readable torch state dict ({type(exc).__name__}: {exc})") from None

    actor = Actor(OBSERVATION_SIZE, config.hidden, action_size(action_mode))
    critic = Critic(OBSERVATION_SIZE, config.hidden, 2 if config.algo == "td3" else 1, action_mode)
    expected = {**{f"actor.{k}": v.shape for k, v in actor.state_dict().items()},
                **{f"critic.{k}": v.shape for k, v in critic.state_dict().items()}}
    _check_state(model_path, state, expected)
    actor.load_state_dict({k[len("actor."):]: v for k, v in state.items() if k.startswith("actor.")})
    critic.load_state_dict({k[len("critic."):]: v for k, v in state.items() if k.startswith("critic.")})
    actor.eval()
    critic.eval()
    return LoadedModel(str(folder), card, config, action_mode, normalizer, actor, critic,
                       content_sha256((folder / CARD_FILE).read_bytes(), data))
