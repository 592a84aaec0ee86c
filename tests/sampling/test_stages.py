"""Document 004's HumanEval prompts: raw completion (the document's) or chat (instruct models),
and what of the generated text reaches the checked program."""

import json

import pytest

from kvspec.sampling import stages as ss


class CharTokenizer:
    """One token per character (ids = code points); a chat template that tags the turn."""

    def __len__(self) -> int:
        return 128

    def __call__(self, text: str) -> dict:
        return {"input_ids": self.encode(text)}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(chr(i) for i in ids)

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        return self.encode(f"<u>{messages[0]['content']}</u><a>")


PROBLEM = {"task_id": "HumanEval/0", "prompt": "def f(x):\n    '''doc'''\n"}


def test_completion_format_is_the_documents() -> None:
    tok = CharTokenizer()
    assert tok.decode(ss.code_prompt(tok, PROBLEM, "completion")) == PROBLEM["prompt"]
    text = "    return x\n\nprint(f(1))"
    assert ss.completion_text(tok, tok.encode(text), "completion") == "    return x"
    assert ss.code_stops(tok, "completion") == []  # no single character holds a blank line


def test_chat_format_opens_a_code_block_and_stops_at_its_fence() -> None:
    tok = CharTokenizer()
    prompt = tok.decode(ss.code_prompt(tok, PROBLEM, "chat"))
    assert prompt.startswith("<u>Complete the following") and PROBLEM["prompt"] in prompt
    assert prompt.endswith("<a>```python\n")
    answer = "def f(x):\n    return x\n```\nExplanation"
    assert ss.completion_text(tok, tok.encode(answer), "chat") == "\ndef f(x):\n    return x\n"
    with pytest.raises(ValueError, match="prompt format"):
        ss.code_prompt(tok, PROBLEM, "fim")


def test_chosen_problems_by_id_or_first_n(tmp_path) -> None:
    path = tmp_path / "he.jsonl"
    path.write_text("".join(json.dumps({"task_id": f"HumanEval/{i}"}) + "\n" for i in range(5)))
    first = ss.chosen_problems(str(path), {"problems": 2, "task_ids": []})
    assert [r["task_id"] for r in first] == ["HumanEval/0", "HumanEval/1"]
    picked = ss.chosen_problems(
        str(path), {"problems": 2, "task_ids": ["HumanEval/3", "HumanEval/1"]}
    )
    assert [r["task_id"] for r in picked] == ["HumanEval/3", "HumanEval/1"]
    one = ss.chosen_problems(str(path), {"problems": 1, "task_ids": ["HumanEval/3", "HumanEval/1"]})
    assert [r["task_id"] for r in one] == ["HumanEval/3"]
    with pytest.raises(ValueError, match="lists 1"):
        ss.chosen_problems(str(path), {"problems": 2, "task_ids": ["HumanEval/3"]})
    with pytest.raises(ValueError, match="HumanEval/9"):
        ss.chosen_problems(str(path), {"problems": 2, "task_ids": ["HumanEval/9"]})
