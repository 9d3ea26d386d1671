"""Starting, watching and stopping federations; the `protofed` command."""
