"""Configuration rules (E0xx): settings and versions that differ between nodes; the config model."""
