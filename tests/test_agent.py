from agents.agent import LLMAgent, View
from agents.backend import HFBackend
from agents.generation import Sampling
from agents.parser import STATUSES
from agents.prompt import PromptBuilder


def test_prompt_memory_window_keeps_only_the_last_k():
    history = [(f"obs{i}", f"act{i}") for i in range(5)]
    msgs = PromptBuilder(memory=2).messages("Find it.", history, "now", ["go north"])
    user = msgs[1]["content"]
    assert "obs3" in user and "obs4" in user and "obs2" not in user
    assert "Commands: go north" in user and "Find it." in msgs[0]["content"]
    assert "obs" not in PromptBuilder(memory=0).messages("t", history, "now", None)[1]["content"]


def test_agent_acts_on_a_batch_and_keeps_exact_tokens(tiny):
    model, tok = tiny
    backend = HFBackend(model, [tok.eos_token_id], tok.pad_token_id, seed=0)
    agent = LLMAgent(tok, backend, PromptBuilder(memory=1), Sampling(max_new_tokens=8), max_prompt_tokens=60)
    views = [
        View("Find the treasure.", (("o" * 400, "go north"),), "You are in the hall.", ("go north",)),
        View("Find the treasure.", (), "You are in the den.", None),
    ]
    acts = agent.act(views)
    assert len(acts) == 2
    for act, view in zip(acts, views):
        assert act.status in STATUSES
        assert len(act.prompt_ids) <= 60  # the long memory entry was dropped to fit
        assert len(act.response_ids) == len(act.logprobs) >= 1
        assert act.prompt_ids == agent.prompt_ids(view)
