"""LLM-as-judge: any Hugging Face chat model rates each response with a rubric prompt.

The judge is shown the problem, the reference answer, the rubric's criteria (or a default
one) and the response, and asked for one digit 0-9. Two ways to read its verdict:

    expected   (default) one forward pass; the score is the expected digit under the
               judge's next-token distribution restricted to "0".."9", divided by 9. No
               sampling noise, no parse failures, and a judge that hedges scores in between.
    generate   greedy decoding of a few tokens; the first digit found is the score / 9. A
               reply without a digit is an error (counted, scored as an error, not a crash).

`--judge-model tiny` (the local tiny model) serves the tests; a real judge is any local
folder or hub id. The judge is frozen and runs without gradients on the policy's device.
Trivial responses (":", "Thought process:") that earn a judge's reward are what the audit's
exploit probes measure (rewards/audit.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from agents.backend import left_pad
from rewards.base import JUDGE_MODES, OUTCOME, RewardItem

SYSTEM = "You are a strict grader of answers to problems."
PROMPT = (
    "Problem: {question}\n"
    "Reference answer: {answer}\n"
    "Criteria:\n{criteria}\n"
    "Response to grade:\n{response}\n"
    "Rate the response from 0 (wrong, empty or off-topic) to 9 (correct and meets every criterion). "
    "Reply with one digit."
)
DEFAULT_CRITERIA = "- the final answer equals the reference answer"
FIELDS = ("question", "answer", "criteria", "response", "task")
_DIGIT = re.compile(r"\d")


def load_prompt(path: str) -> str:
    """A judge prompt template file; {question} {answer} {criteria} {response} {task} are filled in."""
    text = Path(path).expanduser().read_text()
    unknown = set(re.findall(r"{(\w+)}", text)) - set(FIELDS)
    if unknown:
        raise ValueError(f"judge prompt {path}: unknown placeholder(s) {sorted(unknown)}; allowed: {', '.join(FIELDS)}")
    if "{response}" not in text:
        raise ValueError(f"judge prompt {path}: the template must contain {{response}}")
    return text


class JudgeScorer:
    """Scores answers with a frozen causal LM; see the module docstring."""

    scope = OUTCOME

    def __init__(self, model, tokenizer, prompt: str = PROMPT, mode: str = "expected", batch_size: int = 32,
                 rubrics=None, name: str = "judge", max_prompt_tokens: int = 1024) -> None:  # fmt: skip
        if mode not in JUDGE_MODES:
            raise ValueError(f"unknown judge mode {mode!r}; choose one of: {', '.join(JUDGE_MODES)}")
        self.model, self.tok, self.prompt, self.mode = model.eval(), tokenizer, prompt, mode
        self.batch_size, self.rubrics, self.name, self.max_prompt_tokens = batch_size, rubrics, name, max_prompt_tokens
        self.digit_ids = []
        for d in "0123456789":
            ids = tokenizer(d, add_special_tokens=False)["input_ids"]
            if len(ids) != 1:
                raise ValueError(f"the judge's tokenizer splits the digit {d!r} into {len(ids)} tokens")
            self.digit_ids.append(ids[0])

    @classmethod
    def from_pretrained(cls, name: str, device: str, **kw) -> JudgeScorer:
        from agents.model import load_model, load_tokenizer, resolve_model

        path = resolve_model(name)
        model = load_model(path, device, torch.float32 if device == "cpu" else torch.bfloat16)
        return cls(model.requires_grad_(False), load_tokenizer(path), **kw)

    def render(self, item: RewardItem) -> list[int]:
        """The judge's prompt for one item, as token ids (the response is cut, never the instructions)."""
        criteria = self.rubrics.for_task(item.task_type).describe() if self.rubrics else DEFAULT_CRITERIA
        response = item.response[-2000:] or "(empty)"
        values = dict(question=item.question, answer=item.answer if item.answer is not None else "(none)",
                      criteria=criteria, response=response, task=item.task)  # fmt: skip
        text = self.prompt
        for key, value in values.items():  # not str.format: responses may hold braces
            text = text.replace("{" + key + "}", str(value))
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
        chat = self.tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return self.tok(chat, add_special_tokens=False)["input_ids"][-self.max_prompt_tokens :]

    @torch.no_grad()
    def score(self, items: list[RewardItem]) -> list[float | None]:
        out: list[float | None] = []
        for start in range(0, len(items), self.batch_size):
            prompts = [self.render(it) for it in items[start : start + self.batch_size]]
            out += self._expected(prompts) if self.mode == "expected" else self._generate(prompts)
        return out

    def _expected(self, prompts: list[list[int]]) -> list[float | None]:
        ids, mask, positions = left_pad(prompts, self.tok.pad_token_id, self.model.device)
        logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1]  # [B, V]
        probs = torch.softmax(logits[:, self.digit_ids].float(), dim=-1)  # [B, 10]
        expected = probs @ torch.arange(10, dtype=torch.float32, device=probs.device)
        return [float(e) / 9.0 for e in expected]

    def _generate(self, prompts: list[list[int]]) -> list[float | None]:
        ids, mask, _ = left_pad(prompts, self.tok.pad_token_id, self.model.device)
        out = self.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, do_sample=False,
                                  pad_token_id=self.tok.pad_token_id)  # fmt: skip
        replies = self.tok.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True)
        return [verdict(reply) for reply in replies]


def verdict(reply: str) -> float | None:
    """The first digit of a judge's reply / 9; None (no verdict, counted as an error) without one."""
    found = _DIGIT.search(reply)
    return int(found.group()) / 9.0 if found else None
