"""TRACE's capability analysis: discover a capability dictionary, label trajectories, select the real gaps.

- `cases.py`: the trajectories analysed (ours as JSONL, or tau2-bench result files), as prompt-ready cases;
- `discover.py`: the LLM proposes capabilities from successes and failures, over n independent runs, merged;
- `label.py`: NA / PRESENT / LACKING per trajectory and capability, by the LLM or by a `.rubric`'s capabilities;
- `runs.py`: the run-file format (TRACE's own, with the dictionary each run was labelled against), read and written;
- `select.py`: the contrastive selection across runs, exactly as TRACE's released aggregator computes it;
- `chart.py`: the coverage / Delta chart of a selection;
- `commands.py`: what `tracec analyze discover | label | select` run (the command line is `cli/analyze.py`);
- `dictionary.py`, `progress.py`: the capability dictionary file, and a labeling run's resumable progress.
"""
