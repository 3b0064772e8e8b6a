"""From labelled texts to token states: datasets, model loading, word alignment, the backbone with its hooks, the classifier head, fine-tuning, extraction and the activation store."""
