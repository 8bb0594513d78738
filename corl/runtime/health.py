"""Health checks of a label-free run: the failure modes it is known for, watched step by step.

Collapse shows as no reward variance or no entropy; collusion as one pseudo-label shared by
unrelated prompts (FINDINGS). Each symptom is reported once per agent, after it lasted
``PATIENCE`` steps in a row. Skipped (non-finite) updates are counted per agent; the run stops
after ``run.max_nonfinite`` in a row (:func:`corl.runtime.step.watch` reads this state each step).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

#: consecutive steps a symptom must last before it is reported
PATIENCE = 5


@attrs.define
class Health:
    streaks: dict[tuple[str, str], int] = attrs.field(factory=dict)
    warned: set[tuple[str, str]] = attrs.field(factory=set)
    warnings: list[str] = attrs.field(factory=list)
    nonfinite: dict[str, int] = attrs.field(factory=dict)  # consecutive skipped updates per agent

    def check(self, step: int, metrics: Mapping[str, Mapping[str, float]], prompts_per_step: int) -> list[str]:
        """New warnings for this step (also kept in ``warnings``)."""
        new = []
        for name, m in metrics.items():
            # None: not measured this step (no finite reward; no update, so no entropy). Such a step
            # neither extends nor ends a streak: a skipped update in the middle of a collapse hides nothing.
            # the optimizer's own reward (its terms added: an overlong penalty) when it reports one, else the run's
            own = "optimizer_reward_std" in m
            std, entropy = m.get("optimizer_reward_std" if own else "reward_std", math.nan), m.get("entropy")
            symptoms = {
                "reward_std": std < 1e-3 if math.isfinite(std) else None,
                "entropy": entropy < 0.02 if entropy is not None and math.isfinite(entropy) else None,
                "collusion": m["label_mode_share"] > 0.5 and prompts_per_step >= 8,
            }
            for symptom, present in symptoms.items():
                key = (name, symptom)
                if present is None:
                    continue
                self.streaks[key] = self.streaks.get(key, 0) + 1 if present else 0
                if self.streaks[key] == PATIENCE and key not in self.warned:
                    self.warned.add(key)
                    measured = ("the rewards its optimizer trained on, optimizer_reward_std" if own else
                                "the router's reward, without shaping or an optimizer's own terms")
                    text = {"reward_std": f"reward std ~0 (every sample of every prompt rewarded alike; measured on "
                                          f"{measured}): no learning signal; collapse?",
                            "entropy": "policy entropy ~0: sampling has collapsed onto single answers",
                            "collusion": f"{m['label_mode_share']:.0%} of prompts share one pseudo-label: agents "
                                         "converging on a constant answer (collusion?); lower the learning rate"}[symptom]
                    new.append(f"warning: step {step}: agent {name!r}: {text} ({PATIENCE} steps in a row)")
        self.warnings.extend(new)
        return new

    def count_nonfinite(self, metrics: Mapping[str, Mapping[str, float]]) -> dict[str, int]:
        """Agents whose update this step was skipped, with how many in a row."""
        skipped = {}
        for name, m in metrics.items():
            self.nonfinite[name] = self.nonfinite.get(name, 0) + 1 if m.get("nonfinite") else 0
            if self.nonfinite[name]:
                skipped[name] = self.nonfinite[name]
        return skipped

    def to_json(self) -> dict[str, Any]:
        return {"streaks": [[*k, v] for k, v in self.streaks.items()], "warned": sorted(self.warned),
                "warnings": list(self.warnings)}

    @classmethod
    def from_json(cls, health: Mapping[str, Any], nonfinite: Mapping[str, int]) -> Health:
        return cls(streaks={(a, b): v for a, b, v in health["streaks"]}, warned={tuple(k) for k in health["warned"]},
                   warnings=list(health["warnings"]), nonfinite=dict(nonfinite))
