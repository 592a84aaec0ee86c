"""Token streams: documents are shuffled before the split, so validation covers every source."""

from __future__ import annotations

import json
from pathlib import Path

from kvspec.models.tokenizer import train_tokenizer
from kvspec.models.tokens import token_streams


def test_validation_blocks_sample_every_source(tmp_path: Path) -> None:
    docs = [{"id": f"a{i}", "text": "apple apricot almond " * 5, "source": "a"} for i in range(300)]
    docs += [{"id": f"z{i}", "text": "zebra zinc zone " * 5, "source": "z"} for i in range(300)]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))  # written source by source
    tok = train_tokenizer([d["text"] for d in docs], 300, 512)
    tok.save_pretrained(tmp_path / "tok")
    for seed in range(10):  # unshuffled, each of the 2 held-out blocks (of 100) is one source
        _, val, stats = token_streams(corpus, tmp_path / "tok", 0.02, seed=seed)
        text = tok.decode(val.tolist())
        assert "apple" in text and "zebra" in text, seed
        assert stats["val_tokens"] == len(val)
