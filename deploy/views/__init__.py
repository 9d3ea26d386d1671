"""What shows a run: the end table, pictures, progress, the live page, TensorBoard export and
the dynamics figures, all read from the run folder (deploy.run_folder)."""
