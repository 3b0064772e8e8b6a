"""Explaining one prediction: attribution of the prediction to concepts, salient words, ablation by orthogonal projection, the IG baseline, and the serving of explanations."""
