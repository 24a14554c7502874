"""trace_rl"""
