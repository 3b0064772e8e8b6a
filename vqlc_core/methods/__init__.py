"""The concept methods (VQLC, K-Means, LACOAT, the SAE) behind one estimator interface and registry, their measures, and the concept sets built from them."""
