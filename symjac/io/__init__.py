"""Files and views: spec files (TOML), golden data, explanations, pictures."""
