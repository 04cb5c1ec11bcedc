"""A trained actor served by ONNX Runtime: the inference path of the simulator's ``td3`` policy and of
the decision engine alike. No torch here.

``load_actor(folder)`` reads the card and ``model.onnx`` (``td3sched export-onnx`` writes it), and
checks that the graph was exported from this very model (card and state dict hash), takes the
observation layout of this code and outputs the action width of the card's action mode. A folder
without ``model.onnx`` is exported in memory when torch is installed (training machines), and
refused otherwise. The session runs on one intra-op thread: one decision is a batch-1 MLP, which
gains nothing from more, and the scheduler's other threads need the cores.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from td3sched.rl.actions import action_size, card_action_dimensions, card_action_hold, check_action_mode
from td3sched.rl.card import ONNX_FILE, ModelError, card_sibling_spread, card_typical_pods, folder_content_sha256
from td3sched.rl.observation import OBSERVATION_FIELDS, OBSERVATION_SIZE

METADATA_PREFIX = "td3sched."


class OnnxActor:
    """observation(s) -> pre-activations, with the normaliser inside the graph."""

    def __init__(self, session, card: dict, content_sha256: str, folder: str, graph: bytes = b""):
        self.session = session
        self.graph = graph
        """The serialised ONNX graph (the engine hands it to a scheduler that runs the model itself)."""
        self.card = card
        self.content_sha256 = content_sha256
        self.folder = str(folder)
        self.action_mode = check_action_mode(card["action_mode"])
        self.action_size = action_size(self.action_mode)
        self.dimensions = card_action_dimensions(card)
        """What each number of the action is (the card's declared dimensions)."""
        self.typical_pods = card_typical_pods(card)
        """(pool names, typical pods per pool) the card gives for a fragmentation share, or None."""
        self.action_hold_s = card_action_hold(card)
        """Seconds an action holds (the card's ``action_hold_s``; 0: one action per decision)."""
        self.sibling_spread = card_sibling_spread(card)
        """The sibling spread every decision's score takes (the card's ``sibling_spread``; 0: none)."""
        self.input_name = session.get_inputs()[0].name

    @property
    def version(self) -> str:
        """The model's short content hash: in every engine response, log record and metric."""
        return self.content_sha256[:12]

    @classmethod
    def from_bytes(cls, data: bytes, card: dict, content_sha256: str, folder: str) -> "OnnxActor":
        """A session on the serialised graph ``data``, checked against the card (``ModelError``)."""
        import onnxruntime as ort

        where = f"{folder}/{ONNX_FILE}"
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        try:
            session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ONNX Runtime raises its own kinds on a bad graph
            raise ModelError(f"{where}: not a loadable ONNX graph ({type(exc).__name__}: {exc})") from None
        meta = session.get_modelmeta().custom_metadata_map
        source = meta.get(METADATA_PREFIX + "content_sha256")
        if source != content_sha256:
            raise ModelError(f"{where}: exported from model {str(source)[:12]}..., but the folder's card and "
                             f"state dict are {content_sha256[:12]}...: run td3sched export-onnx {folder}")
        if meta.get(METADATA_PREFIX + "observation_fields") != ",".join(OBSERVATION_FIELDS):
            raise ModelError(f"{where}: observation layout differs from this code's {OBSERVATION_SIZE} fields")
        inputs, outputs = session.get_inputs(), session.get_outputs()
        expected = action_size(check_action_mode(card["action_mode"]))
        dims = meta.get(METADATA_PREFIX + "action_dimensions")
        if dims is not None and dims != ",".join(card_action_dimensions(card)):
            raise ModelError(f"{where}: action dimensions {dims!r} differ from the card's "
                             f"{list(card_action_dimensions(card))}: run td3sched export-onnx {folder}")
        if len(inputs) != 1 or inputs[0].shape[1:] != [OBSERVATION_SIZE]:
            raise ModelError(f"{where}: input {[(i.name, i.shape) for i in inputs]}: expected one "
                             f"[batch, {OBSERVATION_SIZE}] observation")
        if len(outputs) != 1 or outputs[0].shape[1:] != [expected]:
            raise ModelError(f"{where}: output {[(o.name, o.shape) for o in outputs]}: expected one [batch, "
                             f"{expected}] action (action mode {card['action_mode']!r})")
        return cls(session, card, content_sha256, folder, bytes(data))

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Pre-activations [A] for one observation [35], or [n, A] for a batch [n, 35]."""
        x = np.asarray(obs, dtype=np.float32)
        single = x.ndim == 1
        if x.shape[-1] != OBSERVATION_SIZE or x.ndim > 2:
            raise ValueError(f"observation shape {x.shape}: expected [{OBSERVATION_SIZE}] or [n, {OBSERVATION_SIZE}]")
        out = self.session.run(None, {self.input_name: np.ascontiguousarray(x.reshape(-1, OBSERVATION_SIZE))})[0]
        return out[0] if single else out


def load_actor(folder) -> OnnxActor:
    """The served actor of a model folder (``ModelError`` on anything missing or mismatched). A name that
    is no folder here is looked up among the user's and the shipped models, as ``load_model`` does."""
    from td3sched.shipped import model_folder

    folder = model_folder(folder)
    card, content = folder_content_sha256(folder)
    path = folder / ONNX_FILE
    if path.is_file():
        return OnnxActor.from_bytes(path.read_bytes(), card, content, str(folder))
    try:
        from td3sched.rl.onnx_export import export_bytes
        from td3sched.rl.model import load_model
    except ImportError:
        raise ModelError(f"{path}: missing, and torch is not installed to export it: run td3sched export-onnx "
                         f"{folder} where torch is") from None
    return OnnxActor.from_bytes(export_bytes(load_model(folder)), card, content, str(folder))
