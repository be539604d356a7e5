"""The option grammar and the typed config."""
