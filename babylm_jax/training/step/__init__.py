"""One training step: the train state, optimizer and schedules, curricula, the mesh, the step functions."""
