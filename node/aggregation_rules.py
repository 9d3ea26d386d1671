"""The aggregation rules by name, torch-free: node.config checks them, node.aggregation
implements each (its COMBINERS)."""

# "mean" is each paper's (sample- or count-weighted) mean; the others bound what one
# poisoned in-neighbour can do. Coordinate-wise median and trimmed mean: Yin et al., ICML
# 2018, "Byzantine-robust distributed learning: towards optimal statistical rates".
# Centered clipping: Karimireddy, He and Jaggi, ICML 2021, "Learning from history for
# Byzantine robust optimization".
AGGREGATION_RULES = ("mean", "median", "trimmed_mean", "clipped_mean")
