"""Memory rules (M0xx): CUDA out-of-memory, peaks, what-if another GPU; the memory model."""
