"""Gates holding the engine to the transformers oracle: token-exact, near-tie, distributional and goldens."""
