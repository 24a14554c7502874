"""Environments, all behind one protocol (`protocol`), and the world an agent acts in.

- `protocol.py`: the `Environment` protocol every target speaks; `agent.py`: the agent protocol and episode loop;
- `capability/`: capability environments written in `.rubric`, run by an interpreter;
- `textworld/`: TextWorld games (facts, agents, seeded task families); `tau2/`: tau2-bench's airline and retail;
- `toolcall.py`, `toolfacts.py`: the agent's tool-call format and the `toolenv` facts every tool environment records;
- `users.py`, `consent.py`: the user an agent talks to, and reading their consent.
Any class of your own speaks the protocol too (`[env] kind = "python"`, `grpo/environments.py`).
"""
