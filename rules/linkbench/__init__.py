"""Link benchmark rules (L0xx): measured bandwidth below what the link should carry; their model."""
