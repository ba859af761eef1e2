"""Launch scripts as the shell and Hydra read them."""
