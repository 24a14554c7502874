"""Experiments on TextWorld task families: the main job (`demo`, what it is asked in `demo_settings`), learning
curves (`learning_curve`), their statistics (`learning_stats`), the learnability gate (`learnability`) and the
small policy they train (`small_policy`)."""
