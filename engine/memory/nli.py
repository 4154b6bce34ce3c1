"""`NLIJudge`: a natural-language-inference model on this machine judges memory updates.

Give it the directory of a sequence-classification NLI model you have (a cross-encoder trained on
MNLI/SNLI, for example, saved with ``save_pretrained``: ``config.json``, the weights and the
tokenizer files). It reads each (older, newer) pair as premise and hypothesis and calls the newer
memory a replacement when the model's probability of *contradiction* reaches `threshold`. The
model is loaded from that directory only: the Hugging Face hub is switched off before
transformers is imported and ``local_files_only`` is set, so nothing is ever downloaded.
No such model ships with Rewind (none is packaged on the registries it installs from); the
default judge stays `RulesJudge`.

    from engine.memory import MemoryConfig, NLIJudge
    Engine.open(url, memory=MemoryConfig(judge=NLIJudge("/models/nli-deberta-v3-small")))

Needs torch and transformers (``pip install 'agent-rewind[dense]'`` brings both).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.errors import JudgeUnavailable
from engine.memory.embeddings import hub_offline
from engine.memory.judges import NO, Judgement, _Cache

__all__ = ["NLIJudge"]


class NLIJudge:
    """A local NLI model as the memory's contradiction judge (see the module)."""

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        threshold: float = 0.9,
        batch_size: int = 16,
        max_length: int = 256,
        device: str = "cpu",
        name: str = "nli",
        cache_size: int = 4096,
    ) -> None:
        """Point the judge at a model directory; the model loads on the first judgement.

        Args:
            model_dir: a sequence-classification model saved with ``save_pretrained``, whose
                labels (``config.id2label``) include ``contradiction`` (any case).
            threshold: probability of contradiction from which the newer memory replaces the
                older one (also the judgement's confidence, so `MemoryConfig.min_confidence`
                applies on top).
            batch_size: pairs per forward pass.
            max_length: word pieces per pair; longer pairs are truncated.
            device: torch device.
            name: shown with each invalidation.
            cache_size: pairs remembered (a pair is never run twice while cached).

        Raises:
            ValueError: a threshold outside (0, 1], a batch size or length below 1.
        """
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must lie in (0, 1], got {threshold!r}")
        if batch_size < 1 or max_length < 8:
            raise ValueError("batch_size must be at least 1 and max_length at least 8")
        self.model_dir = Path(model_dir)
        self.threshold = threshold
        self.batch_size = batch_size
        self.max_length = max_length
        self.device = device
        self.name = name
        self._cache = _Cache(cache_size)
        self._lock = threading.Lock()
        self._model: Any = None
        self._tokenizer: Any = None
        self._contradiction = -1

    def load(self) -> None:
        """Load the model now (otherwise the first `judge` does).

        Raises:
            JudgeUnavailable: torch or transformers is missing, the directory holds no model,
                or the model has no ``contradiction`` label.
        """
        if self._model is not None:
            return
        with self._lock:
            if self._model is not None:
                return
            if not (self.model_dir / "config.json").is_file():
                raise JudgeUnavailable(
                    f"no NLI model in {self.model_dir}: give the directory a model was saved to "
                    "with save_pretrained (config.json, weights, tokenizer files)"
                )
            hub_offline()
            try:
                import torch  # noqa: F401 - transformers needs it to run the model
                from transformers import AutoModelForSequenceClassification, AutoTokenizer
            except ImportError as exc:
                raise JudgeUnavailable(
                    "NLIJudge needs torch and transformers: pip install 'agent-rewind[dense]'"
                ) from exc
            try:
                tokenizer = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True)
                model = AutoModelForSequenceClassification.from_pretrained(
                    self.model_dir, local_files_only=True
                )
            except (OSError, ValueError) as exc:
                raise JudgeUnavailable(f"cannot load the NLI model in {self.model_dir}: {exc}") \
                    from exc
            labels = {int(i): str(v) for i, v in (model.config.id2label or {}).items()}
            found = [i for i, v in labels.items() if v.strip().lower() == "contradiction"]
            if len(found) != 1:
                raise JudgeUnavailable(
                    f"the model in {self.model_dir} has no single 'contradiction' label (its "
                    f"labels: {sorted(labels.values())}); use an NLI model"
                )
            model.to(self.device).eval()
            self._contradiction = found[0]
            self._tokenizer = tokenizer
            self._model = model

    def judge(self, pairs: Sequence[tuple[str, str]]) -> list[Judgement]:
        """Judge a batch: the pairs not cached run through the model, `batch_size` at a time.

        Raises:
            JudgeUnavailable: the model cannot be loaded (see `load`).
        """
        out: list[Judgement | None] = [self._cache.get(p) for p in pairs]
        todo = list(dict.fromkeys(p for p, j in zip(pairs, out, strict=True) if j is None))
        if todo:
            self.load()
            for start in range(0, len(todo), self.batch_size):
                chunk = todo[start:start + self.batch_size]
                for pair, p in zip(chunk, self._contradiction_probabilities(chunk), strict=True):
                    self._cache.put(pair, self._judgement(p))
        return [
            j if j is not None else self._cache.get(p) or NO
            for p, j in zip(pairs, out, strict=True)
        ]

    def _contradiction_probabilities(self, pairs: list[tuple[str, str]]) -> list[float]:
        import torch

        batch = self._tokenizer(
            [old for old, _ in pairs], [new for _, new in pairs], truncation=True,
            max_length=self.max_length, padding=True, return_tensors="pt",
        ).to(self.device)
        with torch.inference_mode():
            logits = self._model(**batch).logits
        probs = torch.softmax(logits.float(), dim=-1)[:, self._contradiction]
        return [float(p) for p in probs.tolist()]

    def _judgement(self, p: float) -> Judgement:
        if not math.isfinite(p) or p < self.threshold:
            return Judgement(False, 0.0 if not math.isfinite(p) else p, "")
        return Judgement(
            True, p,
            f"an NLI model reads the newer memory as contradicting the older one (p={p:.2f})",
            kind="nli",
        )
