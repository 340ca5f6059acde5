"""Text shared by stages and queries: tokens, sentences, entity names."""
