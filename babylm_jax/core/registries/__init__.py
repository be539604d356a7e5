"""One entry per model family and per attention backend, and the special ids and framings the families use."""
