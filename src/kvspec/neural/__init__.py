"""Neural drafting heads of document 002: Mixture of Attentions, EAGLE-2 and Independent."""
