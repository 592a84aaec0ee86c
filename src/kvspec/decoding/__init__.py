"""The decoding loop every method shares: greedy, chain and tree verification, rejection
sampling, cache operations, stop handling, draft models, and the timing harness."""
