"""The offline policy pipeline: annotating tools and compiling the policy."""
