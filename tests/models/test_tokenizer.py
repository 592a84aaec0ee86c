"""Tokenizer: byte-level round trip, special tokens, chat template = corpus chat format."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from kvspec.data.chat import END, format_chat, format_prompt
from kvspec.models.tokenizer import train_tokenizer

TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "The quick brown fox jumps over the lazy dog.",
    "Übergrößenträger café — naïve 東京 🙂",
] * 20


@pytest.fixture(scope="module")
def saved_tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok")
    train_tokenizer(TEXTS, vocab_size=400, model_max_length=128).save_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


@pytest.mark.parametrize("text", [*TEXTS[:3], "unseen: ∑ x_i² ≠ 0\t\n  indented", ""])
def test_round_trip_is_lossless(saved_tokenizer, text: str) -> None:
    ids = saved_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert saved_tokenizer.decode(ids) == text


def test_special_tokens_are_single_ids(saved_tokenizer) -> None:
    for tok in (saved_tokenizer.eos_token, saved_tokenizer.pad_token, END):
        assert len(saved_tokenizer(tok, add_special_tokens=False)["input_ids"]) == 1
    assert saved_tokenizer.model_max_length == 128
    assert len(saved_tokenizer) <= 400


def test_chat_template_matches_corpus_format(saved_tokenizer) -> None:
    msgs = [{"role": "user", "content": "Add 2 and 3."}, {"role": "assistant", "content": "5"}]
    rendered = saved_tokenizer.apply_chat_template(msgs, tokenize=False)
    assert rendered == format_chat("Add 2 and 3.", "5")
    prompt = saved_tokenizer.apply_chat_template(
        msgs[:1], tokenize=False, add_generation_prompt=True
    )
    assert prompt == format_prompt("Add 2 and 3.")
