"""One federation node: config, data, models, algorithms, transport and the round loop."""
