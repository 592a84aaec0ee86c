"""The lecture's worked examples (document 001): our measurements, its numbers beside them.

The lecture has no numbered tables; its printed numbers are transcribed in
`config/paper_results/lecture_examples.csv` and appear only in columns marked "paper".
Each table is in long form (quantity, setting, ours, paper) so that examples of different
shapes share one layout.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from kvspec.io import read_json
from kvspec.report.figures import plt, save_figure
from kvspec.report.tables import paper_subset, write_table

Row = dict[str, Any]


def _paper(inputs: dict[str, list[str]], example: str) -> dict[str, float]:
    """The lecture's numbers of one worked example, by quantity."""
    rows = paper_subset(inputs, "example", example)
    return {q: float(v) for q, v in zip(rows["quantity"], rows["value"], strict=True)}


def _row(quantity: str, setting: str, ours: Any, paper: Any = None, note: str = "") -> Row:
    return {"quantity": quantity, "setting": setting, "ours": ours,
            "paper": paper, "note": note}  # fmt: skip


def _write(rows: list[Row], out: dict[str, str], title: str, notes: list[str]) -> None:
    df = pd.DataFrame(rows)
    df["paper"] = df["paper"].astype(object).where(df["paper"].notna(), "")  # no paper number
    write_table(df, out["csv"], out["md"], title, notes)


def _limited(intensity: float, ridge: float) -> str:
    return "memory" if intensity < ridge else "compute"


# ---- roofline ----------------------------------------------------------------------------------
def render_roofline(
    item: dict[str, Any], inputs: dict[str, list[str]], out: dict[str, str]
) -> None:
    r, paper = read_json(inputs["result"][0]), _paper(inputs, "roofline")
    m, h100 = r["machine"], r["h100"]
    rows = [
        _row("ridge FLOPs/byte", "H100: 989e12 FLOP/s / 3.35e12 B/s", h100["ridge"],
             paper["H100 ridge FLOPs/byte"]),
        _row("ridge FLOPs/byte", "this CPU: peak / bandwidth, measured", m["ridge"]),
        _row("peak GFLOP/s", "this CPU: best fp32 matmul", m["peak_gflop_s"]),
        _row("bandwidth GB/s", "this CPU: copy (read + write)", m["bandwidth"]["copy_gb_s"]),
        _row("bandwidth GB/s", "this CPU: sum (read)", m["bandwidth"]["sum_gb_s"]),
    ]  # fmt: skip
    for p in m["matmul"]:
        rows.append(_row("fp32 matmul GFLOP/s", f"B={p['b']} x {p['d']} @ {p['d']} x {p['f']}, "
                         f"intensity {p['intensity']:.1f}", p["gflop_s"],
                         note=f"{_limited(p['intensity'], m['ridge'])}-limited here"))  # fmt: skip
    for x in r["intensity"]:
        setting = f"{x['phase']} B={x['B']} T={x['T']} S={x['S']}"
        for key, name in (
            ("mlp", "SwiGLU MLP (eq. 10)"),
            ("attention_lecture", "attention S·T/(S+T) (eqs. 12-13)"),
            ("attention_gqa", "attention, GQA count"),
        ):
            note = (
                f"H100 {_limited(x[key], h100['ridge'])}-limited, here "
                f"{_limited(x[key] / 2, m['ridge'])}-limited (fp32: half the bf16 value)"
            )
            rows.append(_row(f"intensity FLOPs/byte, {name}", setting, x[key], note=note))
    dims = r["dims"]
    notes = [
        f"Model {item['model']}: hidden {dims['hidden']}, intermediate {dims['intermediate']}, "
        f"{dims['heads']} query / {dims['kv_heads']} KV heads of {dims['head_dim']}.",
        "Intensities count bf16 bytes, as the lecture does; this CPU computes in fp32 (4 bytes), "
        "which halves them. Measured numbers are medians of repeats in one process.",
        "paper = the lecture's printed number (config/paper_results/lecture_examples.csv).",
    ]
    _write(rows, out, "Lecture: arithmetic intensity and roofline", notes)
    _roofline_figure(r, out)


def _roofline_figure(r: dict[str, Any], out: dict[str, str]) -> None:
    m = r["machine"]
    points = pd.DataFrame(m["matmul"])
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    grid = [min(points["intensity"].min(), 0.25) * 2**i / 4 for i in range(24)]
    roof = [min(m["peak_gflop_s"], m["bandwidth_gb_s"] * x) for x in grid]
    ax.loglog(grid, roof, color="grey", label="roofline (measured peak, bandwidth)")
    ax.loglog(points["intensity"], points["gflop_s"], "o-", label="fp32 matmul, model MLP shape")
    for x in r["intensity"]:
        if x["phase"] == "decode" and x["B"] == 1:
            ax.axvline(x["mlp"] / 2, ls=":", color="C1", label="MLP at decode, B=1 (fp32)")
    ax.axvline(m["ridge"], ls="--", color="C2", label=f"ridge here {m['ridge']:.1f}")
    ax.set_xlabel("arithmetic intensity (FLOPs/byte)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title("Roofline of this CPU")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")
    save_figure(fig, out["figure_png"], out["figure_pdf"])
    points.to_csv(out["figure_csv"], index=False)


# ---- batching ----------------------------------------------------------------------------------
def render_batching(
    item: dict[str, Any], inputs: dict[str, list[str]], out: dict[str, str]
) -> None:
    r = read_json(inputs["result"][0])
    rows = []
    for b in r["batch"]:
        setting = f"decode B={b['B']}, {b['context']}-token context"
        rows += [
            _row("step latency ms", setting, b["step_ms"]),
            _row("throughput tok/s", setting, b["tok_s"]),
            _row("predicted step ms (M_params + B·M_KV) / BW", setting, b["predicted_step_ms"],
                 note=f"{b['step_ms'] / b['predicted_step_ms']:.1f}x measured / predicted"),
        ]  # fmt: skip
    for t in r["ttft"]:
        rows.append(
            _row(
                "time to first token ms",
                f"prompt {t['prompt_tokens']} tokens, B=1",
                t["ttft_ms"],
                note=f"{t['prefill_tok_s']:.0f} prefill tok/s",
            )
        )
    first = r["batch"][0]
    notes = [
        f"Model {item['model']}: weights {first['weight_bytes'] / 2**20:.0f} MiB; KV cache "
        f"{first['kv_bytes_per_sequence'] / 2**20:.2f} MiB per sequence at "
        f"{first['context']} tokens; bandwidth {r['bandwidth_gb_s']:.1f} GB/s measured "
        "(lecture_roofline).",
        "Seeded random prompts; medians of timed steps after one warm-up step.",
        "The lecture gives the model, not numbers: no paper column.",
    ]
    _write(rows, out, "Lecture: latency, throughput and batch size; TTFT", notes)
    _batching_figure(r, out)


def _batching_figure(r: dict[str, Any], out: dict[str, str]) -> None:
    batch, ttft = pd.DataFrame(r["batch"]), pd.DataFrame(r["ttft"])
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(11, 3.6))
    a.plot(batch["B"], batch["step_ms"], "o-", label="measured")
    a.plot(batch["B"], batch["predicted_step_ms"], "s--", label="(M_params + B·M_KV)/BW")
    a.set(xscale="log", xlabel="batch size B", ylabel="ms per decode step", title="latency")
    b.plot(batch["B"], batch["tok_s"], "o-", label="measured")
    b.plot(batch["B"], batch["predicted_tok_s"], "s--", label="predicted")
    b.set(xscale="log", xlabel="batch size B", ylabel="tokens/s", title="throughput")
    c.plot(ttft["prompt_tokens"], ttft["ttft_ms"], "o-")
    c.set(xscale="log", xlabel="prompt tokens", ylabel="ms", title="time to first token")
    for ax in (a, b, c):
        ax.grid(alpha=0.3)
    a.legend(fontsize=7)
    save_figure(fig, out["figure_png"], out["figure_pdf"])
    batch.to_csv(out["figure_csv"], index=False)


# ---- KV cache ----------------------------------------------------------------------------------
def render_kv_cache(
    item: dict[str, Any], inputs: dict[str, list[str]], out: dict[str, str]
) -> None:
    r, paper = read_json(inputs["result"][0]), _paper(inputs, "kv_cache")
    rows = []
    for f in r["formula"]:
        rows.append(
            _row(
                "numbers per token (all layers, K+V)",
                f"{f['model']}: {f['variant']}",
                f["numbers_per_token"],
                note=f"{f['vs_mha']:.3f} of MHA",
            )
        )
    for m in r["measured"]:
        rows.append(_row("bytes per token, measured on a real cache", m["model"],
                         m["measured_bytes_per_token"],
                         note=f"formula {m['formula_bytes_per_token']:.0f} B "
                              f"(measured/formula {m['ratio']:.3f})"))  # fmt: skip
    ds = next(s for name, s in r["documents"].items() if "DeepSeek" in name)
    nh, latent = ds["heads"] * ds["head_dim"], ds["latent"] + ds["rope"]
    rows += [
        _row("DeepSeek-V3 per token and layer", "N·H (one of K or V)", nh,
             paper["DeepSeek N*H per token and layer"]),
        _row("DeepSeek-V3 per token and layer", "MLA C + RoPE", latent,
             paper["DeepSeek MLA C + RoPE per token and layer"]),
        _row("DeepSeek-V3 reduction", "N·H / (C + RoPE)", nh / latent,
             paper["DeepSeek MLA reduction factor"], note="K and V both: twice this"),
    ]  # fmt: skip
    notes = [
        f"Measured after a {r['context']}-token prefill in {r['dtype']}; documents' models "
        "from their published configurations (formula only, bf16 for their bytes).",
        "CLA (pairs) shares each KV cache between two consecutive layers: no model of the "
        "study has it, so it is a formula row only. The MHA row measured for our model is its "
        "exact GQA -> MHA twin (KV heads repeated).",
        "paper = the lecture's printed number (config/paper_results/lecture_examples.csv).",
    ]
    _write(rows, out, "Lecture: KV-cache bytes per token", notes)


# ---- quantization ------------------------------------------------------------------------------
def render_quantization(item: dict[str, Any], inputs: dict[str, list[str]],
                        out: dict[str, str]) -> None:  # fmt: skip
    r = read_json(inputs["result"][0])
    toy_paper, ppl_paper = _paper(inputs, "quantization_toy"), _paper(inputs, "quantization_ppl")
    toy_paper["full precision"] = toy_paper["target y"]
    rows = [
        _row("toy y = x·w (x = [100, 1], w = [0.03, 0.03], grid 0.1)", t["method"], t["y"],
             toy_paper.get(t["method"]), note=f"weights {[round(w, 4) for w in t['weights']]}")
        for t in r["toy"]
    ]  # fmt: skip
    names = {"none": "full precision", "rtn": "RTN", "mixed": "mixed precision", "awq": "AWQ"}
    for m in r["model"]:
        name = names[m["method"]]
        for col, metric in m["metrics"].items():
            se = f"SE ± {metric['stderr']:.3g}" if metric["stderr"] is not None else ""
            alpha = f"mean alpha {m['alpha_mean']:.2f}" if m["alpha_mean"] is not None else ""
            bits = "fp32" if m["bits"] is None else f"{m['bits']}-bit"
            rows.append(
                _row(
                    f"{col} {metric['metric']} ({metric['n']} documents)",
                    f"{item['model']}, {bits}, {name}",
                    metric["value"],
                    ppl_paper.get(name),
                    note="; ".join(x for x in (se, alpha) if x),
                )
            )
    notes = [
        "Toy: the lecture's example run through the same RTN / mixed / AWQ code as the model; "
        "AWQ searched = our alpha search on the toy.",
        "Model: asymmetric integers per group of input channels for every Linear in the "
        "decoder layers (embeddings and output head kept); mixed keeps the 1% of input "
        "channels with the largest mean |x| in fp32; AWQ searches alpha per layer on "
        "calibration inputs. The source model is itself a dequantized 4-bit GGUF at mini scale.",
        "paper = the lecture's printed numbers; its perplexities are for Llama (13.0 = the "
        "original), ours for the study's model on its own scale: compare the pattern.",
    ]
    _write(rows, out, "Lecture: quantization (RTN, mixed precision, AWQ)", notes)


# ---- speculative sampling ---------------------------------------------------------------------
def render_speculative(item: dict[str, Any], inputs: dict[str, list[str]],
                       out: dict[str, str]) -> None:  # fmt: skip
    r, paper = read_json(inputs["result"][0]), _paper(inputs, "speculative")
    rows = []
    for a in r["acceptance"]:
        if "alpha_theory" in a:
            rows.append(_row(f"acceptance of '{a['token']}'", f"p = {a['p_draft']}, "
                             f"q = {a['q_target']}: min(1, q/p) = {a['alpha_theory']}",
                             a["alpha_measured"], paper.get(f"alpha {a['token']}"),
                             note=f"{a['n']} simulated drafts"))  # fmt: skip
        else:
            rows.append(
                _row("residual max(0, q - p), normalised", a["token"], str(a["distribution"]))
            )
    for e in r["exactness"]:
        verdict = "differs from q" if e["p_value"] < 1e-3 else "consistent with q"
        rows.append(
            _row(
                "emitted distribution: chi-square p-value",
                f"{e['example']}, position {e['position']}, {e['verifier']}",
                e["p_value"],
                note=f"{verdict} (chi2 {e['chi2']:.1f}, n {e['n']})",
            )
        )
    for a in r["accepted_length"]:
        setting = f"{item['model']} + draft, k = {a['k']}, alpha = {a['alpha']:.3f}"
        rows += [
            _row("tokens per verification, (1 - a^(k+1))/(1 - a)", setting,
                 a["expected_tokens_per_step"]),
            _row("tokens per verification, measured", setting, a["measured_tokens_per_step"],
                 note=f"{a['tokens']} tokens in {a['steps']} steps"),
        ]  # fmt: skip
    notes = [
        "Worked example: the lecture's p and q for 'quick' and 'brown'; the rest of each "
        "distribution is ours (kvspec.lecture.spec_example). Simulated with the study's "
        "verifier and two deliberately wrong ones, so the chi-square test shows its power.",
        "alpha = mean over positions of sum_x min(p(x), q(x)) along the target's own sampled "
        "continuations; the formula assumes independent acceptances.",
        "paper = the lecture's printed acceptance probabilities.",
    ]
    _write(rows, out, "Lecture: speculative sampling, exactness, expected accepted length", notes)


# ---- scheduling -------------------------------------------------------------------------------
def render_scheduling(item: dict[str, Any], inputs: dict[str, list[str]],
                      out: dict[str, str]) -> None:  # fmt: skip
    r = read_json(inputs["result"][0])
    keys = {"tok_s": "throughput tok/s", "latency_mean_s": "latency mean s",
            "latency_p50_s": "latency p50 s", "latency_p90_s": "latency p90 s",
            "ttft_mean_s": "time to first token mean s", "useful_share": "useful share of "
            "row-steps", "steps": "decode steps"}  # fmt: skip
    rows = [_row(name, policy, run[key]) for key, name in keys.items()
            for policy, run in r["runs"].items()]  # fmt: skip
    if {"static", "continuous"} <= set(r["runs"]):
        s, c = r["runs"]["static"], r["runs"]["continuous"]
        rows += [_row("continuous / static", "throughput", c["tok_s"] / s["tok_s"]),
                 _row("continuous / static", "mean latency", c["latency_mean_s"] /
                      s["latency_mean_s"])]  # fmt: skip
    reqs = r["requests"]
    same = ", ".join(f"{p} {v:.0%}" for p, v in r["same_tokens_as_first_policy"].items())
    notes = [
        f"{len(reqs)} requests, prompts of {min(q['prompt'] for q in reqs)}-"
        f"{max(q['prompt'] for q in reqs)} tokens, {min(q['new_tokens'] for q in reqs)}-"
        f"{max(q['new_tokens'] for q in reqs)} new tokens each (greedy, seeded), "
        f"{r['settings']['slots']} slots, model {item['model']}.",
        "Both schedulers share one left-padded KV cache and prefill each request alone on "
        "admission; static batching frees its slots only when the whole batch is done.",
        f"Requests whose tokens equal the first policy's: {same}.",
        "The lecture describes the schedulers without numbers: no paper column.",
    ]
    _write(rows, out, "Lecture: continuous vs static batching", notes)


def render_paged(item: dict[str, Any], inputs: dict[str, list[str]],
                 out: dict[str, str]) -> None:  # fmt: skip
    r = read_json(inputs["result"][0])
    per_token, block = r["kv_bytes_per_token"], r["settings"]["block_size"]
    rows = []
    for a in r["layouts"]:
        setting = f"{a['policy']} batching, {a['layout']}"
        peak_mb = a["peak_allocated"] * per_token / 1e6
        rows += [_row("wasted share of allocated KV slots", setting, a["wasted_share"]),
                 _row("peak KV MB allocated", setting, peak_mb)]  # fmt: skip
    s = r["shared"]
    last = s["steps"][-1] if s["steps"] else {"physical_blocks": 0, "private_blocks": 0}
    n = r["settings"]["samples"]
    rows += [
        _row("physical blocks, shared prefix + copy-on-write", f"{n} samples, end",
             last["physical_blocks"]),
        _row("blocks with a private copy per sample", f"{n} samples, end", last["private_blocks"]),
        _row("copy-on-write copies", f"{n} samples", s["copies"]),
        _row("every sample reads back its prompt + tokens", f"{n} samples",
             s["reads_back_exactly"]),
    ]  # fmt: skip
    notes = [
        f"Fragmentation: the scheduling example's batches (its per-step trace of the padded "
        f"cache's width and each row's length), {per_token:,} KV bytes per token for model "
        f"{item['model']}. 'padded batch' is the cache we ran (left-padded rows of the "
        f"longest row's width); 'contiguous reservation' gives each request its prompt + the "
        f"largest new-token budget up front (the lecture's status quo; internal fragmentation "
        f"only: external fragmentation between reservations is not modelled); blocks of "
        f"{block} hold ceil(length / {block}) blocks per row.",
        f"Copy-on-write: {n} seeded samples (temperature {r['settings']['temperature']}) of "
        f"one {s['prompt_tokens']}-token prompt ({s['prompt_blocks']} blocks) through "
        f"kvspec.lecture.paged.BlockManager; lengths {r['sample_lengths']}. The stand-in for "
        "each position's K/V is its token id, so reading back checks the block tables.",
        "The lecture describes PagedAttention without numbers: no paper column.",
    ]
    _write(rows, out, "Lecture: PagedAttention, fragmentation and copy-on-write", notes)
