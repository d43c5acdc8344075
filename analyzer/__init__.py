"""Discovery, identity, the DuckDB store, the CLI and the reports. Never imports Textual."""
