"""Rewards: the sources a run trains on, and the audit that says how far to trust them.

base       RewardItem (what a scorer sees), Scorer, FunctionScorer, score_batch
verifiers  exact, numeric, regex, contains, max_length, the format check
rubric     per-task weighted criteria in YAML/JSON, partial credit, validated on load
judge      LLM-as-judge with a rubric prompt (any Hugging Face chat model)
layer      named sources composed with weights (`--reward numeric=1,format=0.1`)
audit      honeypots (false positive/negative rates), exploit probes, length signals,
           agreement between scorers; `python -m scripts.audit_rewards`
"""
