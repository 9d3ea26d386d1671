"""The backends: where and how a federation's nodes run (local processes, containers, Compose,
swarm services), the plan they start from, the node image, link shaping and the capacity check."""
