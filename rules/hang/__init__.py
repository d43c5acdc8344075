"""Hang rules (H0xx): who the others wait for, and why no timeout fired; the hang, init and timeout models."""
