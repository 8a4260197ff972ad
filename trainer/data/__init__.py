"""Problems and how answers are checked: problem files and pools, the prompt stream, the math
verifiers, and the synthetic math and code tasks."""
