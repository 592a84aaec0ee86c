"""Byte-level BPE tokenizer trained on the pretraining corpus, saved as an HF tokenizer."""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from kvspec.data.chat import BOS, CHAT_TEMPLATE, EOS, PAD, SPECIAL_TOKENS


def train_tokenizer(
    texts: Iterable[str], vocab_size: int, model_max_length: int
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE of `vocab_size` (special tokens included) on `texts`."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=SPECIAL_TOKENS[3:],
    )
    fast.chat_template = CHAT_TEMPLATE
    # transformers 5 defaults this to 1e30; lm-eval reads it to truncate contexts.
    fast.model_max_length = model_max_length
    return fast
