"""Hardware rules (G0xx): GPU faults, degraded PCIe and NIC links, MIG; the hardware model."""
