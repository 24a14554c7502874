"""TRACE end to end: `tracec pipeline CONFIG.toml` (config, targets, resumable steps, the steps, the report)."""
