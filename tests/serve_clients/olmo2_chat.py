"""OLMo 2 Instruct's chat format for the client tests (Python standard library only).

write_tokenizer_config(model_dir): puts the published allenai/OLMo-2-1124-7B-Instruct
tokenizer_config.json (committed as tests/serve/fixtures/olmo2_instruct_tokenizer_config.json:
bos/eos/pad tokens and its Jinja chat_template) into the served model's directory.

render(messages): the prompt that template gives, written out here by hand from the
format (Tülu 3's: a BOS, then `<|role|>\\n` turns, assistant turns ending in EOS), never
by the server's template interpreter: it is the expected value the tests compare with.
"""
import os
import shutil

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FIXTURE = os.path.join(REPO, "tests", "serve", "fixtures", "olmo2_instruct_tokenizer_config.json")

BOS = EOS = "<|endoftext|>"  # id 100257 in the dolma2 tokenizer, also the model's EOS
EOS_ID = 100257


def write_tokenizer_config(model_dir):
    """Copies the OLMo 2 Instruct tokenizer_config.json into model_dir."""
    shutil.copyfile(FIXTURE, os.path.join(model_dir, "tokenizer_config.json"))


def render(messages, add_generation_prompt=True):
    """The text OLMo 2 Instruct's template makes of `messages` (a list of {"role",
    "content"}; roles system, user, assistant; other roles render nothing, as in the
    template)."""
    out = BOS
    for i, m in enumerate(messages):
        last = i == len(messages) - 1
        role, content = m["role"], m["content"]
        if role in ("system", "user"):
            out += f"<|{role}|>\n{content}\n"
        elif role == "assistant":
            out += f"<|assistant|>\n{content}{EOS}" + ("" if last else "\n")
        if last and add_generation_prompt:
            out += "<|assistant|>\n"
    return out


# Conversations the tests send: one user turn; and a system prompt with a finished
# exchange before the last user turn.
CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a terse assistant."},
     {"role": "user", "content": "Name a colour."},
     {"role": "assistant", "content": "Blue."},
     {"role": "user", "content": "Another one?"}],
]
