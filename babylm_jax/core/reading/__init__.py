"""Reading user files: JSON and JSON Lines with errors naming file and line, and text normalisation."""
