"""Gates that hold the engine to the Hugging Face transformers oracle: token-exact, near-tie, distributional, goldens."""
