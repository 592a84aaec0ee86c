"""llama.cpp as a peer engine: what a CPU user would run instead of PyTorch (issue 33).

`llama-cpp-python` ships on PyPI as a source release only; `build_llama_cpp` builds the pinned
version into a directory of its own, for the x86 extensions this CPU lists in /proc/cpuinfo
(`cmake_args`; never `-march=native`: a VM that reports AMX made such a build die on an illegal
instruction, and fixed AVX-512 flags died the same way on AVX2-only machines), and
`import_llama_cpp` refuses a build whose extensions this CPU lacks. `llama_cpp_method`
decodes one prompt greedily with llama.cpp on the model's own GGUF file (the quantized weights
the study's float32 target was dequantized from), plainly or with llama-cpp-python's prompt
lookup decoding. It is a different engine on different numbers (quantized weights, quantized
activations in the dot products), so its tokens are compared with our greedy decoding and
reported, never assumed equal.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvspec.decoding.bench import Method, Run
from kvspec.io import atomic_path
from kvspec.ngram.source_build import download_sdist, pip, require_tools, run_checked

VERSION = "0.3.36"
DISKCACHE = "5.6.3"
# GGML's x86 switches and the /proc/cpuinfo flags each compiles for (GGML_AVX512: -mavx512f
# -mavx512cd -mavx512vl -mavx512dq -mavx512bw); without GGML_NATIVE, GGML turns SSE4.2 to F16C on
# by default, so every switch is set either way
GGML_X86 = {
    "GGML_SSE42": ("sse4_2",),
    "GGML_AVX": ("avx",),
    "GGML_AVX2": ("avx2",),
    "GGML_FMA": ("fma",),
    "GGML_BMI2": ("bmi2",),
    "GGML_F16C": ("f16c",),
    "GGML_AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    "GGML_AVX512_VBMI": ("avx512vbmi",),
    "GGML_AVX512_VNNI": ("avx512_vnni",),
    "GGML_AVX512_BF16": ("avx512_bf16",),
}
# LLAVA_BUILD=OFF: llama-cpp-python's multimodal library (mtmd), which text decoding never loads
BASE_ARGS = "-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAVA_BUILD=OFF"


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> frozenset[str]:
    """The feature flags of this machine's first CPU (empty where /proc/cpuinfo has none)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return frozenset()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return frozenset(line.partition(":")[2].split())


def cmake_args(flags: frozenset[str]) -> str:
    """llama.cpp's CMake arguments for a CPU with `flags`: no native tuning, each GGML x86
    switch ON where `flags` lists all it needs, else OFF (all OFF without x86 flags)."""
    switches = [f"-D{name}={'ON' if flags.issuperset(needs) else 'OFF'}"
                for name, needs in GGML_X86.items()]  # fmt: skip
    return " ".join([BASE_ARGS, *switches])


def build_llama_cpp(dest: Path, threads: int = 1, version: str = VERSION) -> Path:
    """Build llama-cpp-python `version` from its source release into `dest` (atomically)."""
    require_tools("llama.cpp")
    args = cmake_args(cpu_flags())
    with tempfile.TemporaryDirectory() as work, atomic_path(dest) as out:
        env = {"CMAKE_ARGS": args, "CMAKE_BUILD_PARALLEL_LEVEL": str(threads)}
        sdist = download_sdist("llama-cpp-python", version, Path(work))
        # its pure-Python dependency that the study's environment lacks (numpy, jinja2 and
        # typing-extensions are there already: not installed twice)
        pip("install", "--no-deps", "--target", str(out), str(sdist), f"diskcache=={DISKCACHE}",
            env=env)  # fmt: skip
        run_checked([sys.executable, "-c", "import llama_cpp"], {"PYTHONPATH": str(out)})
        sha = hashlib.sha256(sdist.read_bytes()).hexdigest()
        info = {"package": "llama-cpp-python", "version": version, "sdist": sdist.name,
                "sdist_sha256": sha, "cmake_args": args}  # fmt: skip
        (out / "BUILD.json").write_text(json.dumps(info, indent=2))
    return dest


def import_llama_cpp(build_dir: str | Path) -> Any:
    """The `llama_cpp` module of a directory written by `build_llama_cpp`; a build for x86
    extensions this CPU lacks is refused (it would die on an illegal instruction)."""
    check_build_fits(build_dir, cpu_flags())
    path = str(Path(build_dir).resolve())
    if path not in sys.path:
        sys.path.insert(0, path)
    import llama_cpp
    import llama_cpp.llama_speculative

    return llama_cpp


def check_build_fits(build_dir: str | Path, flags: frozenset[str]) -> None:
    """Raise if the build in `build_dir` was compiled for x86 extensions `flags` lacks."""
    args = json.loads((Path(build_dir) / "BUILD.json").read_text())["cmake_args"].split()
    missing = [name for name, needs in GGML_X86.items()
               if f"-D{name}=ON" in args and not flags.issuperset(needs)]  # fmt: skip
    if missing:
        raise RuntimeError(
            f"the llama.cpp build in {build_dir} was compiled for {missing}, which this CPU lacks "
            f"(it would die on an illegal instruction): delete {build_dir} to rebuild it here"
        )


def llama_cpp_method(
    build_dir: str | Path,
    gguf: str | Path,
    *,
    lookup: int | None,
    max_new_tokens: int,
    stops: Sequence[int],
    threads: int,
    n_ctx: int = 4096,
) -> Method:
    """Greedy decoding of one prompt (token ids) by llama.cpp on `gguf`; with `lookup` = k,
    llama-cpp-python's prompt lookup decoding drafting up to k tokens per step. A Run's
    `forwards` counts llama.cpp's evaluation calls (the prompt's yields the first token)."""
    llama_cpp = import_llama_cpp(build_dir)
    draft = llama_cpp.llama_speculative.LlamaPromptLookupDecoding(num_pred_tokens=lookup) \
        if lookup else None  # fmt: skip
    llm = llama_cpp.Llama(model_path=str(gguf), n_ctx=n_ctx, n_threads=threads,
                          n_threads_batch=threads, draft_model=draft, verbose=False)  # fmt: skip
    calls, default_budget = _count_evals(llm), max_new_tokens

    def run(prompt: list[int], max_new_tokens: int | None = None) -> Run:
        calls[0], out, budget = 0, [], max_new_tokens or default_budget
        t0 = time.perf_counter()
        for token in llm.generate(prompt, top_k=1, temp=0.0, reset=True):
            out.append(int(token))
            if token in stops or len(out) >= budget:
                break
        seconds = time.perf_counter() - t0
        return Run(out, seconds, calls[0])  # the prompt's evaluation yields the first token

    return run


def _count_evals(llm: Any) -> list[int]:
    """A one-element counter of `llm.eval` calls (each is one forward of the model)."""
    calls = [0]
    inner = llm.eval

    def counted(tokens: Sequence[int]) -> None:
        calls[0] += 1
        inner(tokens)

    llm.eval = counted
    return calls
