"""A small CNN trained on scikit-learn's bundled 8x8 digits."""
