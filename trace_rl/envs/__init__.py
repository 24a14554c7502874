"""Environments, all behind one protocol (`protocol`), and the world an agent acts in.

- `protocol.py`: the `Environment` protocol every target speaks; `agent.py`: the agent protocol and episode loop;
- `capability/`: capability environments written in `.rubric`, run by an interpreter;
- `textworld/`: TextWorld games (facts, agents, seeded task families); `tau2/`: tau2-bench's airline and retail;
- `toolsandbox/`: ToolSandbox's world, tools, scenarios, scoring and user simulator;
- `toolcall.py`, `toolfacts.py`: the agent's tool-call format and the `toolenv` facts every tool environment records;
- `users.py`, `consent.py`: the user an agent talks to, and reading their consent;
- `config.py`: the `[env]` section of a config, one sub-section per kind; `registry.py`: the kinds, section to fresh
  environments (what the trainer, the TRACE pipeline and `evaluate` make theirs with); `mixture.py`: a weighted
  mixture of environments as one.
Any class of your own speaks the protocol too (`[env] kind = "python"`): `user_factory.py` imports its factory and
gives what it makes the protocol's defaults when its class does not subclass `Environment`.
"""
