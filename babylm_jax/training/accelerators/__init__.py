"""What a recipe runs on and compiles to: the backend line, every step shape compiled, GPU targets, AOT reports."""
