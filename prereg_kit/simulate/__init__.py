"""Studies simulated before any run: synthetic run logs (``synth``), synthetic gradient-test
results (``gradient``) and the dry run that analyzes them as a study (``dryrun``)."""
