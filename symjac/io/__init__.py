"""Files and views: spec files (TOML) and their cases against an implementation, sweeps, golden data
(``golden/``), explanations, pictures."""
