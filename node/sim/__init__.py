"""The sim backend's core: a federation's nodes as threads of one process, in virtual time."""
