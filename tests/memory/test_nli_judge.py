"""`NLIJudge` runs a real sequence-classification model from a local directory.

No NLI model can be downloaded here, so the test trains a tiny BERT on a handful of pairs (a few
seconds, seeded) and saves it with ``save_pretrained``, the way a user's model directory looks.
What is checked is the adapter: labels found by name, pairs read as (older, newer), batching and
the cache do not change answers, the hub is never asked, and the memory invalidates with the
judge's name and reason. It says nothing about how good any real NLI model is.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from engine import Engine, JudgeUnavailable  # noqa: E402
from engine.memory import MemoryConfig, NLIJudge  # noqa: E402

WORDS = ["i", "live", "in", "boston", "moved", "to", "denver", "like", "tea", "coffee", "my",
         "number", "is", "new", "seven", "five", "and", "also"]
UPDATES = [("i live in boston", "i moved to denver"),
           ("my number is five", "my new number is seven"), ("i like tea", "i moved to boston")]
NOT_UPDATES = [("i live in boston", "i like tea"), ("i like tea", "i also like coffee"),
               ("my number is five", "i like coffee")]


def _model_dir(tmp_path, labels=("CONTRADICTION", "ENTAILMENT", "NEUTRAL"), steps=60):
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    tokenizer = BertTokenizer(str(vocab))
    config = BertConfig(vocab_size=len(WORDS) + 5, hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64, num_labels=len(labels),
                        id2label=dict(enumerate(labels)),
                        label2id={v: i for i, v in enumerate(labels)})
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = BertForSequenceClassification(config)
    contradiction = next((i for i, v in enumerate(labels) if v.lower() == "contradiction"), 0)
    neutral = len(labels) - 1
    pairs = UPDATES + NOT_UPDATES
    targets = torch.tensor([contradiction] * len(UPDATES) + [neutral] * len(NOT_UPDATES))
    batch = tokenizer([a for a, _ in pairs], [b for _, b in pairs], padding=True,
                      return_tensors="pt")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        loss = model(**batch, labels=targets).loss
        loss.backward()
        optimizer.step()
    out = tmp_path / "nli-model"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return _model_dir(tmp_path_factory.mktemp("nli"))


def test_pairs_read_as_older_then_newer_batched_and_cached_alike(model_dir, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    judge = NLIJudge(model_dir, threshold=0.8, batch_size=2)
    pairs = UPDATES + NOT_UPDATES
    got = judge.judge(pairs)
    assert [j.contradicts for j in got] == [True] * len(UPDATES) + [False] * len(NOT_UPDATES)
    assert all(j.confidence >= 0.8 and j.kind == "nli" and "p=" in j.reason
               for j in got[:len(UPDATES)])
    import os
    assert os.environ["HF_HUB_OFFLINE"] == "1"  # set before transformers could go online
    one_by_one = NLIJudge(model_dir, threshold=0.8, batch_size=1).judge(pairs)
    assert [round(j.confidence, 4) for j in one_by_one] == [round(j.confidence, 4) for j in got]
    calls = []
    real = judge._contradiction_probabilities
    judge._contradiction_probabilities = lambda chunk: calls.append(chunk) or real(chunk)
    assert judge.judge(list(reversed(pairs))) == list(reversed(got))  # all from the cache
    assert calls == []


def test_the_memory_invalidates_with_the_judges_name_and_reason(model_dir, tmp_path):
    engine = Engine.open(f"sqlite:///{tmp_path}/m.db",
                         memory=MemoryConfig(judge=NLIJudge(model_dir, threshold=0.8)))
    s = engine.session("nli")
    old = s.memory.add("my number is five")
    kept = s.memory.add("i like tea")
    s.memory.add("my new number is seven")
    items = {m.id: m for m in s.memory.items(include_invalid=True)}
    assert items[kept].valid
    assert not items[old].valid
    assert items[old].invalid_by == "nli" and "NLI model" in (items[old].invalid_reason or "")
    engine.close()


def test_a_missing_directory_or_a_model_without_contradiction_says_so(tmp_path):
    with pytest.raises(JudgeUnavailable, match="no NLI model in"):
        NLIJudge(tmp_path / "nowhere").judge([("a", "b")])
    other = _model_dir(tmp_path, labels=("POSITIVE", "NEGATIVE"), steps=0)
    with pytest.raises(JudgeUnavailable, match=r"no single 'contradiction' label.*NEGATIVE"):
        NLIJudge(other).judge([("i like tea", "i moved to denver")])
    assert json.loads((other / "config.json").read_text())["id2label"]
    with pytest.raises(ValueError, match="threshold"):
        NLIJudge(tmp_path, threshold=0)
