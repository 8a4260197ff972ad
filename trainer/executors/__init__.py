"""``prereg run --executor slurm|ray``: a study's runs on a cluster, through existing engines
(submitit for Slurm, Ray) rather than a scheduler of our own. See docs/scale-out.md.

Nothing is imported here: ``trainer.launch`` reads :mod:`.options` without loading submitit or Ray.
"""
