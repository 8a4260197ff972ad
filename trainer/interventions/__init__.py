"""The interventions under study, each registered by name: dense credit rules (Monte-Carlo
reward, equal-iteration rule and its controls, learned critic, reuse variants), the length
reward, and prompt-selection rules."""
