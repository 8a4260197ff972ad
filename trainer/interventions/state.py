"""What dense credit rules keep across iterations (checkpointed where it must be)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from trainer.core.policy import Policy, load_policy
from trainer.interventions.critic import CriticBuffer


@dataclass
class DenseState:
    """What dense rules keep across iterations: the critic's buffer (checkpointed), the frozen
    reference policy of the implicit reward (reloaded from the start model, never checkpointed)
    and the frozen PRM of the ``prm_*`` rules (reloaded, never checkpointed)."""

    critic: CriticBuffer | None = None  # created on first use
    _reference: Any = field(default=None, repr=False)
    _prm: Any = field(default=None, repr=False)  # the frozen process-reward model, loaded once

    def prm(self, load: Callable[[], Any]) -> Any:
        """The frozen PRM of the ``prm_*`` credit rules (``load()`` on first use; never checkpointed)."""
        if self._prm is None:
            self._prm = load()
        return self._prm

    def reference(self, policy):
        if self._reference is None:
            ref = load_policy(policy.cfg, policy.path)
            ref.model.eval().requires_grad_(False)
            self._reference = Policy(ref.model, ref.tokenizer, ref.device, ref.amp_dtype, ref.cfg, ref.path)
        return self._reference

    def state_dict(self) -> dict:
        return {"critic": None if self.critic is None else self.critic.state_dict()}

    def load_state_dict(self, d: dict | None) -> None:
        if d and d.get("critic") is not None:
            self.critic = CriticBuffer.from_state_dict(d["critic"])
