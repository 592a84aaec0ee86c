"""Document 002's Table 8: the quality of every method's outputs in the decoding job (the
same greedy outputs are expected of every method: speculative decoding with greedy
verification is greedy decoding). Metrics per set (`quality.sets`: metric -> set): HumanEval
pass@1 of the answer's code through the sandboxed runner, GSM8K final-answer accuracy and
CNN/DM ROUGE-L F against the prompt records' `reference`; outputs are the decoding job's
(cut at its max_new_tokens, as recorded)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pandas as pd

from kvspec.io import read_json, write_json, write_text
from kvspec.provenance import provenance

log = logging.getLogger(__name__)


def score_answer(metric: str, record: Mapping[str, Any], answer: str, timeout_s: float,
                 require_fs: bool = True) -> float:  # fmt: skip
    """1/0 (HumanEval passed, GSM8K correct) or ROUGE-L F (CNN/DM) of one answer."""
    from kvspec.eval.quality import code_of, gsm8k_correct, rouge_l_f

    if metric == "humaneval":
        from kvspec.eval.humaneval import check_completion

        code = "\n" + code_of(answer)
        return float(check_completion(record, code, timeout_s, require_fs).passed)
    reference = record.get("reference")
    if not reference:
        raise ValueError(f"prompt {record.get('id')!r} has no reference: {metric} needs one")
    return float(
        gsm8k_correct(reference, answer) if metric == "gsm8k" else rouge_l_f(reference, answer)
    )


def _by_id(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {str(r.get("task_id") or r["id"]): r for r in records}


def quality_stage(inputs: Mapping[str, str], out_runs: str, out_summary: str, *,
                  quality: Mapping[str, Any], max_new_tokens: int,
                  sandbox: Mapping[str, Any]) -> None:  # fmt: skip
    """Score every decoded answer of the scored sets (`inputs`: `runs`, `model` for its
    tokenizer, `prompts_<set>`); per (method, metric): prompts, mean score, answers cut at
    max_new_tokens, answers identical to greedy's."""
    from transformers import AutoTokenizer

    from kvspec.data.records import read_jsonl

    tokenizer = AutoTokenizer.from_pretrained(inputs["model"])
    runs = read_json(inputs["runs"])["records"]
    rows = []
    for metric, name in quality["sets"].items():
        prompts = _by_id(list(read_jsonl(inputs[f"prompts_{name}"])))
        greedy = {
            r["prompt"]: r["tokens"] for r in runs if r["set"] == name and r["method"] == "greedy"
        }
        for r in (r for r in runs if r["set"] == name):
            answer = tokenizer.decode(r["tokens"], skip_special_tokens=True)
            score = score_answer(metric, prompts[r["prompt"]], answer, quality["timeout_s"],
                                 sandbox["filesystem"] == "required")  # fmt: skip
            rows.append({"method": r["method"], "metric": metric, "set": name,
                         "prompt": r["prompt"], "score": score,
                         "cut": len(r["tokens"]) >= max_new_tokens,
                         "same_as_greedy": r["tokens"] == greedy.get(r["prompt"])})  # fmt: skip
        log.info(
            "%s (%s): %d answers scored", metric, name, sum(x["metric"] == metric for x in rows)
        )
    if not rows:
        raise ValueError("no decoded answers of the scored sets in the decoding runs")
    table = pd.DataFrame(rows)
    summary = table.groupby(["method", "metric"], sort=False).agg(
        n=("score", "size"), score=("score", "mean"), cut=("cut", "sum"),
        same_as_greedy=("same_as_greedy", "mean")).reset_index()  # fmt: skip
    log.info("\n%s", summary.to_string())
    write_json(out_runs, {"answers": rows, "sandbox": _isolation(sandbox),
                          "provenance": provenance(dict(quality))})  # fmt: skip
    write_text(out_summary, summary.to_csv(index=False))


def _isolation(sandbox: Mapping[str, Any]) -> dict[str, Any]:
    """The sandbox policy and what this machine let it apply."""
    from kvspec.eval.sandbox import detect_isolation

    iso = detect_isolation()
    return {"filesystem": sandbox["filesystem"], "mount_namespace": bool(iso.mounts),
            "network_namespace": iso.netns, "own_uid": iso.drop_uid}  # fmt: skip
