"""Figure and table builders; `python -m figures` (make figures) runs every builder into figures/out/."""
