"""N-gram speculative decoding (thesis ch. 4): infini-gram indexes of earlier responses,
their drafters, acceptance analysis, and the speed benchmark's methods."""
