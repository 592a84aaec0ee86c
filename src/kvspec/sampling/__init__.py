"""Speculative sampling and three-model speculative sampling (document 004)."""
