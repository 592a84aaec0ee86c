"""Helpers referenced by the local task YAMLs with `!function kvspec_utils.<name>`."""

from lm_eval.tasks.wikitext.preprocess_wikitext import wikitext_detokenizer


def wikitext_target(doc: dict) -> str:
    """The document text after lm-eval's WikiText detokenizer (normalized field `text`)."""
    return wikitext_detokenizer({"page": doc["text"]})
