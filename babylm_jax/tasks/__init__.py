"""The task registry, the evaluation files' layouts and formats, audits of training text."""
