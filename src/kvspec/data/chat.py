"""The chat format shared by the tokenizer's template and the pretraining corpus."""

from __future__ import annotations

BOS, EOS, PAD = "<|bos|>", "<|endoftext|>", "<|pad|>"
USER, ASSISTANT, END = "<|user|>", "<|assistant|>", "<|end|>"
SPECIAL_TOKENS = [EOS, BOS, PAD, USER, ASSISTANT, END]

# Jinja template stored in the tokenizer; `format_chat` below renders the same string.
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'user' %}" + USER + "\n{{ m['content'] }}" + END + "\n"
    "{% else %}" + ASSISTANT + "\n{{ m['content'] }}" + END + "\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}" + ASSISTANT + "\n{% endif %}"
)


def format_prompt(prompt: str) -> str:
    """A user turn followed by the assistant header: what the model continues."""
    return f"{USER}\n{prompt}{END}\n{ASSISTANT}\n"


def format_chat(prompt: str, response: str) -> str:
    """One complete user/assistant exchange, as the chat template renders it."""
    return f"{format_prompt(prompt)}{response}{END}\n"
