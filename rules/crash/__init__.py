"""Crash rules (X0xx): which process failed first and what ended the job; the crash model."""
