"""Performance rules (P00x, P010): utilisation, irregular iterations, checkpoints, stragglers; their models."""
