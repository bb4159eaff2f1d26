from transformers import AutoModelForCausalLM, AutoTokenizer

from agents.model import is_local_path


def test_tiny_model_is_a_standard_hf_checkpoint(tiny_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_path)
    tok = AutoTokenizer.from_pretrained(tiny_path)
    cfg = model.config
    assert cfg.model_type == "qwen2"
    assert cfg.hidden_size // cfg.num_attention_heads >= 32  # vLLM CPU attention kernels
    assert not cfg.tie_word_embeddings
    assert cfg.vocab_size == len(tok) and tok.eos_token == "<|im_end|>"


def test_tokenizer_round_trips_any_text_and_has_a_chat_template(tiny):
    _, tok = tiny
    for text in ["You are in the kitchen.", "émoji 🚀 & <weird> \t tabs", "<action>go north</action>"]:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == text
    assert len(tok("<action>", add_special_tokens=False)["input_ids"]) == 1
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nu<|im_end|>\n<|im_start|>assistant\n"


def test_local_paths_versus_hub_ids():
    assert is_local_path("./ckpt") and is_local_path("/abs/path") and is_local_path("runs/x/checkpoints/iter_3")
    assert not is_local_path("Qwen/Qwen2.5-1.5B-Instruct")
