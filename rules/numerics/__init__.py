"""Numerics rules (P02x): the first NaN and loss spikes; the numerics model."""
