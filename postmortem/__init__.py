"""postmortem: the front ends (command line, reports, exports, the generator); the layers below are
subpackages mapped from the top-level folders (docs/architecture.md)."""
