"""The runtime of compiled rubrics: trajectories to fact columns, the kernels' inputs and outputs, TRCA rewards,
advantages and exact context groups, capability labels, evaluation and output."""
