"""Ready-made tunekit trainables: each module defines build_data(config, ctx) and build_model(config, ctx)."""
