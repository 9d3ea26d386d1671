"""The aggregation rules by name, torch-free: node.config checks them, node.aggregation
implements each (its COMBINERS)."""

# "mean" is each paper's (sample- or count-weighted) mean; the others bound what one
# poisoned in-neighbour can do. Coordinate-wise median and trimmed mean: Yin et al., ICML
# 2018, "Byzantine-robust distributed learning: towards optimal statistical rates".
# clipped_mean is self-centred clipping: each in-neighbour's model pulled towards this
# node's own to at most the median distance (He, Karimireddy and Jaggi 2022, "Byzantine-
# robust decentralized learning via ClippedGossip"; centered clipping: Karimireddy, He
# and Jaggi, ICML 2021). "reputation" clips the same way and weighs each in-neighbour also
# by its trust: the share of its pull that clipping kept, averaged over the rounds
# (node.defences), so a neighbour far off round after round fades out.
AGGREGATION_RULES = ("mean", "median", "trimmed_mean", "clipped_mean", "reputation")
