"""Sentence embeddings with the pretrained all-MiniLM-L6-v2 model, `neuron` against CPU."""
