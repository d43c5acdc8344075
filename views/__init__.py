"""Views: Textual-free view models of a store and a report, shared by the reports and the TUI."""
