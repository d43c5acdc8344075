"""Network rules (N0xx): RDMA errors, bootstrap interfaces, NCCL transports, RAS; their models."""
