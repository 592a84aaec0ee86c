"""kvspec: reproduce CARE (GQA -> MLA) and infini-gram speculative decoding."""
