"""Document 004's stages: the draft-length x temperature sweep (Figures 1-4), HumanEval pass@k
per decoding method (Figures 6, 8, 9), timing side by side (Figures 5, 7, 10), and MATH-500
accuracy with and without speculative decoding."""

from __future__ import annotations

import logging
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tqdm import tqdm

from kvspec.data.records import read_jsonl
from kvspec.decoding.generate import stop_ids
from kvspec.io import Journal, read_json, write_json
from kvspec.models.load import load_model, use_threads
from kvspec.provenance import provenance
from kvspec.sampling.methods import Sample, Settings, make_batch_sampler, make_sampler
from kvspec.seeds import derive

log = logging.getLogger(__name__)


INSTRUCTION = (
    "Complete the following Python function. Reply with the complete function in one Python "
    "code block.\n"
)
FENCE = "```"


def code_prompt(tokenizer: Any, problem: dict[str, Any], fmt: str) -> list[int]:
    """Prompt ids of a HumanEval problem. "completion": the raw function stub, continued (the
    document's setting, for base models). "chat": the stub in one user turn asking for the
    whole function, the answer opened with a Python code fence (instruct models)."""
    if fmt == "completion":
        return tokenizer(problem["prompt"])["input_ids"]
    if fmt != "chat":
        raise ValueError(f"prompt format must be 'completion' or 'chat', not {fmt!r}")
    from kvspec.decoding.generate import prompt_ids

    ids = prompt_ids(tokenizer, f"{INSTRUCTION}{FENCE}python\n{problem['prompt']}{FENCE}")
    return ids + tokenizer.encode(f"{FENCE}python\n", add_special_tokens=False)


def code_stops(tokenizer: Any, fmt: str) -> list[int]:
    """Token ids that end a code answer: a blank line ("completion", as the document stops) or
    the closing code fence ("chat")."""
    mark = "\n\n" if fmt == "completion" else FENCE
    return [i for i in range(len(tokenizer)) if mark in tokenizer.decode([i])]


def completion_text(tokenizer: Any, tokens: Sequence[int], fmt: str) -> str:
    """What follows the problem's stub in the checked program: the generated text up to its
    first blank line ("completion"), or the code block's content on a new line ("chat")."""
    text = tokenizer.decode(list(tokens), skip_special_tokens=True)
    if fmt == "completion":
        return text.split("\n\n")[0]
    return "\n" + text.split(FENCE)[0]


def chosen_problems(path: str, settings: Mapping[str, Any],
                    pilot: str | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """`problems: pilot`: every problem the pilot (`pilot_stage`'s output) selected, in
    HumanEval order. Otherwise the first `problems` of `settings["task_ids"]` (in that order)
    when ids are given, else the first `problems` records."""
    records, n = list(read_jsonl(path)), settings["problems"]
    if n == "pilot":
        if pilot is None:
            raise ValueError("sampling problems 'pilot' need the pilot's result")
        ids = read_json(pilot)["selected"]
        if not ids:
            raise ValueError(f"{pilot}: the pilot selected no HumanEval problem (none passed "
                             "sampling.pilot.min_passes times): nothing to compare")  # fmt: skip
        return _by_id(path, records, ids)
    ids = settings.get("task_ids")
    if not ids:
        return records[:n]
    chosen = _by_id(path, records, ids)
    if len(ids) < n:
        raise ValueError(f"{n} problems asked for but sampling.task_ids lists {len(ids)}")
    return chosen[:n]


def _by_id(path: str, records: list[dict[str, Any]], ids: Sequence[str]) -> list[dict[str, Any]]:
    by_id = {r["task_id"]: r for r in records}
    missing = [t for t in ids if t not in by_id]
    if missing:
        raise ValueError(f"{path}: no HumanEval problems {missing}")
    return [by_id[t] for t in ids]


def _load(models: Mapping[str, str], dtype: str, device: str, engines: tuple[str, str | None],
          targets: set[str]) -> dict[str, torch.nn.Module]:  # fmt: skip
    """{model name: loaded model} of {model name: directory}: `targets` in engines[0], the
    models that only draft in engines[1] (None: engines[0]); a draft's engine changes what it
    proposes, never the target's law the samplers keep."""
    linear, draft_linear = engines[0], engines[1] or engines[0]
    return {n: load_model(p, dtype=dtype, device=device,
                          linear=linear if n in targets else draft_linear)[0]
            for n, p in models.items()}  # fmt: skip


def _targets(target: str, *methods: Mapping[str, Any]) -> set[str]:
    """The models that verify: the stage's target and any method's own."""
    return {target, *(m["target"] for m in methods if "target" in m)}


def tokenizer_of(model_dir: str) -> Any:
    """The tokenizer every model of a stage shares (the first target's)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def _settings(common: Mapping[str, Any], method: Mapping[str, Any], stops: Sequence[int],
              greedy: bool = False) -> Settings:  # fmt: skip
    """Decoding settings of one method: the stage's sampling settings, the method's depths
    and draft cut-off."""
    depths = {k: method[k] for k in ("k", "k_d", "k_i", "stop_below") if k in method}
    return Settings(
        common["max_new_tokens"],
        common.get("temperature", 1.0),
        common.get("top_p", 1.0),
        greedy=greedy,
        stops=tuple(stops),
        **depths,
    )


def _roles(method: Mapping[str, Any], target: str,
           loaded: Mapping[str, torch.nn.Module]) -> dict[str, torch.nn.Module]:  # fmt: skip
    """{role: model} of a method spec ({kind, draft?, mid?, k...}) over loaded models."""
    roles = {"target": loaded[method.get("target", target)]}
    roles |= {r: loaded[method[r]] for r in ("draft", "mid") if r in method}
    return roles


def _row(s: Sample) -> dict[str, Any]:
    return {"tokens": len(s.tokens), "seconds": s.seconds, "steps": s.steps,
            "drafted": s.drafted, "accepted": s.accepted, "passing": s.passing,
            "batch": s.batch}  # fmt: skip


# ---- Figures 1-4: max draft tokens x temperature ------------------------------------------------
def sweep_stage(models: Mapping[str, str], problems: str, out: str, *, target: str,
                method: Mapping[str, Any], settings: Mapping[str, Any], seed: int, device: str,
                dtype: str, linear: str, threads: int,
                draft_linear: str | None = None) -> None:  # fmt: skip
    """Speculative sampling with `method`'s draft at every (k, temperature) on the first
    HumanEval prompts, and repeated runs at the Figure 2 temperature: per run drafted,
    prefix-accepted and passing drafts, tokens and seconds."""
    use_threads(threads)
    engines = (linear, draft_linear)
    loaded = _load(models, dtype, device, engines, _targets(target, method))
    tok = tokenizer_of(next(iter(models.values())))
    roles = _roles(method, target, loaded)
    fmt = settings["prompt_format"]
    prompts = [code_prompt(tok, r, fmt) for r in chosen_problems(problems, settings)]
    stops = [*stop_ids(roles["target"], tok), *code_stops(tok, fmt)]

    def run(k: int, temperature: float, prompt: list[int], run_seed: int) -> dict[str, Any]:
        s = _settings({**settings, "temperature": temperature}, {**method, "k": k}, stops)
        return _row(make_sampler(method["kind"], roles, s)(prompt, run_seed))

    grid = [{"k": k, "temperature": t, "prompt": i, **run(k, t, p, derive(seed, "sweep", i))}
            for t in tqdm(settings["temperatures"], desc="temperatures", mininterval=10)
            for k in settings["ks"] for i, p in enumerate(prompts)]  # fmt: skip
    t2 = settings["figure_2_temperature"]
    repeats = [{"k": k, "temperature": t2, "repeat": r,
                **run(k, t2, prompts[0], derive(seed, "repeat", r))}
               for k in tqdm(settings["ks"], desc="figure 2 repeats", mininterval=10)
               for r in range(settings["repeats"])]  # fmt: skip
    write_json(out, {"grid": grid, "repeats": repeats, "method": dict(method),
                     "settings": dict(settings),
                     "provenance": provenance(dict(settings), models=dict(models))})  # fmt: skip


# ---- Figures 6, 8, 9: HumanEval pass@k --------------------------------------------------------
def humaneval_stage(models: Mapping[str, str], problems: str, out: str, *, target: str,
                    label: str, method: Mapping[str, Any], settings: Mapping[str, Any],
                    sandbox: Mapping[str, Any], seed: int, device: str, dtype: str,
                    linear: str, threads: int, checkpoint: str | None = None,
                    pilot: str | None = None, draft_linear: str | None = None) -> None:  # fmt: skip
    """`completions` samples per problem (`chosen_problems`: the pilot's selection, chosen ids
    or the first ones; the stub continued or answered in a chat turn) with one method, the same
    seeds for every method; verdicts from the sandboxed runner; pass@k per problem. Each sample
    is journalled in `checkpoint` as it finishes, so a killed job resumes with the samples it
    had (each has its own random stream, so the resumed samples are the uninterrupted run's).
    Classical sampling decodes a problem's missing samples as one batch
    (`make_batch_sampler`: the same samples on the packed engine), journalled together."""
    from kvspec.eval.humaneval import score

    use_threads(threads)
    engines = (linear, draft_linear)
    loaded = _load(models, dtype, device, engines, _targets(target, method))
    tok = tokenizer_of(next(iter(models.values())))
    roles = _roles(method, target, loaded)
    chosen, fmt = chosen_problems(problems, settings, pilot), settings["prompt_format"]
    stops = [*stop_ids(roles["target"], tok), *code_stops(tok, fmt)]
    decoding = _settings(settings, method, stops)
    sampler = make_sampler(method["kind"], roles, decoding)
    batched = make_batch_sampler(method["kind"], roles, decoding)
    journal = Journal(checkpoint, key="sample")
    done = journal.done()
    bar = tqdm(total=len(chosen) * settings["completions"], initial=len(done), desc=label,
               mininterval=10)  # fmt: skip
    for p, problem in enumerate(chosen):
        prompt = code_prompt(tok, problem, fmt)
        todo = [c for c in range(settings["completions"]) if (p, c) not in done]
        seeds = [derive(seed, "humaneval", p, c) for c in todo]
        made = batched(prompt, seeds) if batched and seeds else (sampler(prompt, x) for x in seeds)
        for c, sample in zip(todo, made, strict=True):
            done[(p, c)] = {"sample": [p, c], "task_id": problem["task_id"],
                            "completion": completion_text(tok, sample.tokens, fmt),
                            **_row(sample)}  # fmt: skip
            journal.append([done[(p, c)]])
            bar.update()
    bar.close()
    runs = [done[(p, c)] for p in range(len(chosen)) for c in range(settings["completions"])]
    samples = {t["task_id"]: [r["completion"] for r in runs if r["task_id"] == t["task_id"]]
               for t in chosen}  # fmt: skip
    scored = score(samples, settings["ks"], {p["task_id"]: p for p in chosen},
                   timeout_s=settings["timeout"], workers=1,
                   require_fs=sandbox["filesystem"] == "required")  # fmt: skip
    log.info("%s: %s", label, scored["pass@k"])
    write_json(out, {"method": label, "spec": dict(method), "pass@k": scored["pass@k"],
                     "isolation": scored["isolation"],
                     "per_task": scored["per_task"], "runs": runs, "settings": dict(settings),
                     "pilot": _pilot_summary(pilot),
                     "provenance": provenance(dict(settings), models=dict(models))})  # fmt: skip
    journal.finish()


def _pilot_summary(pilot: str | None) -> dict[str, Any] | None:
    """What the report says of the pilot: its settings, problems tried, problems selected."""
    if pilot is None:
        return None
    r = read_json(pilot)
    return {"settings": r["settings"], "tried": len(r["tasks"]), "selected": len(r["selected"])}


# ---- Figures 5, 7, 10: time per token side by side --------------------------------------------
def timing_stage(models: Mapping[str, str], problems: str, out: str, *, target: str,
                 methods: Mapping[str, Mapping[str, Any]], settings: Mapping[str, Any],
                 seed: int, device: str, dtype: str, linear: str,
                 threads: int, draft_linear: str | None = None) -> None:  # fmt: skip
    """Every method on the same prompts and seeds, interleaved run by run in one process after
    a discarded warm-up: latency per sample, time per token, throughput (mean, std)."""
    use_threads(threads)
    engines = (linear, draft_linear)
    loaded = _load(models, dtype, device, engines, _targets(target, *methods.values()))
    tok = tokenizer_of(next(iter(models.values())))
    fmt = settings["prompt_format"]
    prompts = [code_prompt(tok, r, fmt) for r in chosen_problems(problems, settings)]
    stops = [*stop_ids(next(iter(loaded.values())), tok), *code_stops(tok, fmt)]
    samplers = {name: make_sampler(m["kind"], _roles(m, target, loaded),
                                   _settings(settings, m, stops))
                for name, m in methods.items()}  # fmt: skip
    for sampler in samplers.values():
        sampler(prompts[0], derive(seed, "warm-up"))  # discarded
    rows = []
    for run in tqdm(range(settings["runs"]), desc="timing runs", mininterval=10):
        for name, sampler in samplers.items():
            for i, prompt in enumerate(prompts):
                sample = sampler(prompt, derive(seed, "timing", run, i))
                rows.append({"method": name, "run": run, "prompt": i, **_row(sample)})
    write_json(out, {"rows": rows, "summary": timing_summary(rows), "methods": dict(methods),
                     "settings": dict(settings),
                     "provenance": provenance(dict(settings), models=dict(models))})  # fmt: skip


def timing_summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per method: mean and std over runs of seconds per token, latency per sample, tok/s."""
    out = {}
    for name in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == name]
        runs = sorted({r["run"] for r in mine})
        spt = [
            sum(r["seconds"] for r in mine if r["run"] == run)
            / max(1, sum(r["tokens"] for r in mine if r["run"] == run))
            for run in runs
        ]
        out[name] = {
            "s_per_token_mean": statistics.mean(spt),
            "s_per_token_std": statistics.stdev(spt) if len(spt) > 1 else 0.0,
            "latency_s": statistics.mean(r["seconds"] for r in mine),
            "tok_s": sum(r["tokens"] for r in mine) / sum(r["seconds"] for r in mine),
        }  # fmt: skip
    return out


# ---- MATH-500 ---------------------------------------------------------------------------------
def math500_stage(models: Mapping[str, str], problems: str, out: str, *, target: str,
                  method: Mapping[str, Any], settings: Mapping[str, Any], seed: int,
                  device: str, dtype: str, linear: str, threads: int,
                  draft_linear: str | None = None) -> None:  # fmt: skip
    """Greedy answers of the target alone and with greedy speculative decoding by `method`
    (the same answers are expected), graded with math-verify."""
    from kvspec.decoding.generate import prompt_ids
    from kvspec.eval.math500 import is_correct

    use_threads(threads)
    engines = (linear, draft_linear)
    loaded = _load(models, dtype, device, engines, _targets(target, method))
    tok = tokenizer_of(next(iter(models.values())))
    roles = _roles(method, target, loaded)
    records = list(read_jsonl(problems))[: settings["problems"]]
    stops = stop_ids(roles["target"], tok)
    rows = []
    for kind in ("classical", method["kind"]):
        sampler = make_sampler(kind, roles, _settings(settings, method, stops, greedy=True))
        for i, r in enumerate(tqdm(records, desc=f"math500 {kind}", mininterval=10)):
            prompt = prompt_ids(tok, r["problem"] + settings["instruction"])
            sample = sampler(prompt, derive(seed, "math500", i))
            text = tok.decode(sample.tokens, skip_special_tokens=True)
            rows.append({"method": kind, "id": r["id"], "answer": r["answer"], "response": text,
                         "correct": is_correct(r["answer"], text), **_row(sample)})  # fmt: skip
    plain, spec = ([r for r in rows if r["method"] == k] for k in ("classical", method["kind"]))
    write_json(out, {
        "rows": rows, "n": len(records), "method": dict(method), "settings": dict(settings),
        "accuracy": {"classical": _mean(plain), "speculative": _mean(spec)},
        "identical_responses": sum(
            a["response"] == b["response"] for a, b in zip(plain, spec, strict=True)
        ),
        "provenance": provenance(dict(settings), models=dict(models)),
    })  # fmt: skip


def _mean(rows: list[dict[str, Any]]) -> float:
    return sum(r["correct"] for r in rows) / len(rows)
