"""tau2-bench on interplay: tau2's domains as envs, its user simulator in the user seat, any
harness in the agent's seat, scored by tau2's own evaluator."""
