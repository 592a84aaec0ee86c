"""llama.cpp as a peer engine: what a CPU user would run instead of PyTorch (issue 33).

`llama-cpp-python` ships on PyPI as a source release only; `build_llama_cpp` builds the pinned
version into a directory of its own (portable AVX2/AVX-512 flags: this VM reports AMX, which a
`-march=native` build uses and then dies on with an illegal instruction). `llama_cpp_method`
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
# portable x86-64 flags of this machine class; GGML_NATIVE would pick up AMX (see above)
CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON "
    "-DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DLLAMA_BUILD_TESTS=OFF "
    "-DLLAMA_BUILD_EXAMPLES=OFF"
)


def build_llama_cpp(dest: Path, threads: int = 1, version: str = VERSION) -> Path:
    """Build llama-cpp-python `version` from its source release into `dest` (atomically)."""
    require_tools("llama.cpp")
    with tempfile.TemporaryDirectory() as work, atomic_path(dest) as out:
        env = {"CMAKE_ARGS": CMAKE_ARGS, "CMAKE_BUILD_PARALLEL_LEVEL": str(threads)}
        sdist = download_sdist("llama-cpp-python", version, Path(work))
        # its pure-Python dependency that the study's environment lacks (numpy, jinja2 and
        # typing-extensions are there already: not installed twice)
        pip("install", "--no-deps", "--target", str(out), str(sdist), f"diskcache=={DISKCACHE}",
            env=env)  # fmt: skip
        run_checked([sys.executable, "-c", "import llama_cpp"], {"PYTHONPATH": str(out)})
        sha = hashlib.sha256(sdist.read_bytes()).hexdigest()
        info = {"package": "llama-cpp-python", "version": version, "sdist": sdist.name,
                "sdist_sha256": sha, "cmake_args": CMAKE_ARGS}  # fmt: skip
        (out / "BUILD.json").write_text(json.dumps(info, indent=2))
    return dest


def import_llama_cpp(build_dir: str | Path) -> Any:
    """The `llama_cpp` module of a directory written by `build_llama_cpp`."""
    path = str(Path(build_dir).resolve())
    if path not in sys.path:
        sys.path.insert(0, path)
    import llama_cpp
    import llama_cpp.llama_speculative

    return llama_cpp


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
    calls = _count_evals(llm)

    def run(prompt: list[int]) -> Run:
        calls[0], out = 0, []
        t0 = time.perf_counter()
        for token in llm.generate(prompt, top_k=1, temp=0.0, reset=True):
            out.append(int(token))
            if token in stops or len(out) >= max_new_tokens:
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
