"""Learning algorithms behind one interface, picked by name."""
