"""TRACE, capability-targeted training: capability analysis (`analysis/`), synthesis of environments and operator
libraries (`synth/`), a base model with capability adapters (`adapters`, `peft_adapters`, `vllm_adapters`), routing
(`routing`), evaluation on a target (`evaluate`, `eval_table`), and the pipeline that runs them end to end
(`pipeline/`)."""
