"""trace_rl/envs"""
