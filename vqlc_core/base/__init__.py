"""The ground floor: the run error, atomic safetensors/JSON IO, file integrity, resumable checkpoints and torchrun helpers. Imports nothing else of vqlc_core."""
