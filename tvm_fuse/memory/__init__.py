"""Memory planning of a Relay module's intermediate tensors."""
