"""Multi-reward pieces: the recipe's reward spec (channels, aggregation, anchor), the reward
channels, the aggregation rules and the isolated program judge. No torch here."""
