// Chat templates rendered byte for byte as the models' own Jinja templates
// render under Hugging Face's apply_chat_template.
//
// llama_cpp_cases: templates and expected prompts from llama.cpp's
// tests/test-chat-template.cpp (ggml-org/llama.cpp, commit 03f94f19), for its
// fixed six-message conversation with add_generation_prompt (the "jinja"
// expectation where that file has one). family_cases and the expected strings
// after them: what Python's jinja2 3.1.6, set up as transformers sets it up
// (trim_blocks, lstrip_blocks, loopcontrols, HF's tojson), rendered from the
// published templates caflm carries as built-ins.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "caflm/gguf/gguf.hpp"
#include "caflm/gguf/gguf_writer.hpp"
#include "caflm/text/chat_prompt.hpp"
#include "caflm/text/chat_template.hpp"
#include "caflm/text/tokenizer.hpp"
#include "caflm/text/vocabulary.hpp"

using caflm::ChatMessage;
using caflm::ChatTemplate;
using caflm::jinja::Value;

namespace {

struct TemplateCase {
  std::string name, source, bos, eos, expected;
};
struct BuiltinCase {
  std::string name, bos, eos, expected;
};
struct FamilyCase {
  std::string name, what;
  std::vector<ChatMessage> messages;
  bool add_generation_prompt;
  std::string bos, eos, expected;
};

const std::vector<ChatMessage> conversation = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "Hi there"},
    {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},
    {"user", "Another question"},
};

// clang-format off
const std::vector<TemplateCase> llama_cpp_cases = {
    {"teknium/OpenHermes-2.5-Mistral-7B",
     "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
     "", "",
     "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n"},
    {"TheBloke/FusionNet_34Bx2_MoE-AWQ",
     "{%- for idx in range(0, messages|length) -%}\n{%- if messages[idx]['role'] == 'user' -%}\n{%- if idx > 1 -%}\n{{- bos_token + '[INST] ' + messages[idx]['content'] + ' [/INST]' -}}\n{%- else -%}\n{{- messages[idx]['content'] + ' [/INST]' -}}\n{%- endif -%}\n{% elif messages[idx]['role'] == 'system' %}\n{{- '[INST] <<SYS>>\\n' + messages[idx]['content'] + '\\n<</SYS>>\\n\\n' -}}\n{%- elif messages[idx]['role'] == 'assistant' -%}\n{{- ' '  + messages[idx]['content'] + ' ' + eos_token -}}\n{% endif %}\n{% endfor %}",
     "<s>", "</s>",
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s><s>[INST] Who are you [/INST]    I am an assistant    </s><s>[INST] Another question [/INST]"},
    {"bofenghuang/vigogne-2-70b-chat",
     "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% elif true == true and not '<<SYS>>' in messages[0]['content'] %}{% set loop_messages = messages %}{% set system_message = 'Vous êtes Vigogne, un assistant IA créé par Zaion Lab. Vous suivez extrêmement bien les instructions. Aidez autant que vous le pouvez.' %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'system' %}{{ '<<SYS>>\\n' + content.strip() + '\\n<</SYS>>\\n\\n' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
     "", "</s>",
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s>[INST] Who are you [/INST] I am an assistant </s>[INST] Another question [/INST]"},
    {"mlabonne/AlphaMonarch-7B",
     "{% for message in messages %}{{bos_token + message['role'] + '\\n' + message['content'] + eos_token + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ bos_token + 'assistant\\n' }}{% endif %}",
     "<s>", "</s>",
     "<s>system\nYou are a helpful assistant</s>\n<s>user\nHello</s>\n<s>assistant\nHi there</s>\n<s>user\nWho are you</s>\n<s>assistant\n   I am an assistant   </s>\n<s>user\nAnother question</s>\n<s>assistant\n"},
    {"openchat/openchat-3.5-0106",
     "{{ bos_token }}{% for message in messages %}{{ 'GPT4 Correct ' + message['role'].title() + ': ' + message['content'] + '<|end_of_turn|>'}}{% endfor %}{% if add_generation_prompt %}{{ 'GPT4 Correct Assistant:' }}{% endif %}",
     "", "",
     "GPT4 Correct System: You are a helpful assistant<|end_of_turn|>GPT4 Correct User: Hello<|end_of_turn|>GPT4 Correct Assistant: Hi there<|end_of_turn|>GPT4 Correct User: Who are you<|end_of_turn|>GPT4 Correct Assistant:    I am an assistant   <|end_of_turn|>GPT4 Correct User: Another question<|end_of_turn|>GPT4 Correct Assistant:"},
    {"deepseek-ai/deepseek-coder-33b-instruct",
     "{% if not add_generation_prompt is defined %}\n{% set add_generation_prompt = false %}\n{% endif %}\n{%- set ns = namespace(found=false) -%}\n{%- for message in messages -%}\n    {%- if message['role'] == 'system' -%}\n        {%- set ns.found = true -%}\n    {%- endif -%}\n{%- endfor -%}\n{{bos_token}}{%- if not ns.found -%}\n{{'You are an AI programming assistant, utilizing the Deepseek Coder model, developed by Deepseek Company, and you only answer questions related to computer science. For politically sensitive questions, security and privacy issues, and other non-computer science questions, you will refuse to answer\\n'}}\n{%- endif %}\n{%- for message in messages %}\n    {%- if message['role'] == 'system' %}\n{{ message['content'] }}\n    {%- else %}\n        {%- if message['role'] == 'user' %}\n{{'### Instruction:\\n' + message['content'] + '\\n'}}\n        {%- else %}\n{{'### Response:\\n' + message['content'] + '\\n<|EOT|>\\n'}}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n{% if add_generation_prompt %}\n{{'### Response:'}}\n{% endif %}",
     "", "",
     "You are a helpful assistant### Instruction:\nHello\n### Response:\nHi there\n<|EOT|>\n### Instruction:\nWho are you\n### Response:\n   I am an assistant   \n<|EOT|>\n### Instruction:\nAnother question\n### Response:\n"},
    {"eachadea/vicuna-13b-1.1",
     "{%- for message in messages %}{%- if message['role'] == 'system' -%}{{- '' + message['content'] + '\n\n' -}}{%- else -%}{%- if message['role'] == 'user' -%}{{-'USER: ' + message['content'] + '\n'-}}{%- else -%}{{-'ASSISTANT: ' + message['content'] + '</s>\n' -}}{%- endif -%}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}{{-'ASSISTANT:'-}}{%- endif -%}",
     "", "",
     "You are a helpful assistant\n\nUSER: Hello\nASSISTANT: Hi there</s>\nUSER: Who are you\nASSISTANT:    I am an assistant   </s>\nUSER: Another question\nASSISTANT:"},
    {"CohereForAI/c4ai-command-r-plus",
     "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% elif false == true %}{% set loop_messages = messages %}{% set system_message = 'You are Command-R, a brilliant, sophisticated, AI-assistant trained to assist human users by providing thorough responses. You are trained by Cohere.' %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% if system_message != false %}{{ '<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>' + system_message + '<|END_OF_TURN_TOKEN|>' }}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% set content = message['content'] %}{% if message['role'] == 'user' %}{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + content.strip() + '<|END_OF_TURN_TOKEN|>' }}{% elif message['role'] == 'assistant' %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>'  + content.strip() + '<|END_OF_TURN_TOKEN|>' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}{% endif %}",
     "", "",
     "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a helpful assistant<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hello<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hi there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Who are you<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>I am an assistant<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Another question<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"},
    {"Llama-3",
     "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}",
     "", "",
     "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"Phi-3-small",
     "{{ bos_token }}{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n' + message['content'] + '<|end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}",
     "", "",
     "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n"},
    {"Phi-3-vision",
     "{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n' + message['content'] + '<|end|>\n' }}{% endfor %}{% if add_generation_prompt and messages[-1]['role'] != 'assistant' %}{{- '<|assistant|>\n' -}}{% endif %}",
     "", "",
     "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n"},
    {"ChatGLM3",
     "{% for message in messages %}{% if loop.first %}[gMASK]sop<|{{ message['role'] }}|>\n {{ message['content'] }}{% else %}<|{{ message['role'] }}|>\n {{ message['content'] }}{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}",
     "", "",
     "[gMASK]sop<|system|>\n You are a helpful assistant<|user|>\n Hello<|assistant|>\n Hi there<|user|>\n Who are you<|assistant|>\n    I am an assistant   <|user|>\n Another question<|assistant|>"},
    {"ChatGLM4",
     "[gMASK]<sop>{% for item in messages %}{% if item['tools'] is defined %}<|system|>\n你是一个名为 ChatGLM 的人工智能助手。你是基于智谱AI训练的语言模型 GLM-4 模型开发的，你的任务是针对用户的问题和要求提供适当的答复和支持。\n\n# 可用工具{% set tools = item['tools'] %}{% for tool in tools %}{% if tool['type'] == 'function' %}\n\n## {{ tool['function']['name'] }}\n\n{{ tool['function'] | tojson(indent=4) }}\n......{% endif %}{% endfor %}{% endif %}{% if item['content'] %}<|{{ item['role'] }}|>{{ item['metadata'] }}\n{{ item['content'] }}{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}",
     "", "",
     "[gMASK]<sop><|system|>\nYou are a helpful assistant<|user|>\nHello<|assistant|>\nHi there<|user|>\nWho are you<|assistant|>\n   I am an assistant   <|user|>\nAnother question<|assistant|>\n"},
    {"MiniCPM-3B-OpenHermes-2.5-v2-GGUF",
     "{% for message in messages %}{% if message['role'] == 'user' %}{{'<用户>' + message['content'].strip() + '<AI>'}}{% else %}{{message['content'].strip()}}{% endif %}{% endfor %}",
     "", "",
     "You are a helpful assistant<用户>Hello<AI>Hi there<用户>Who are you<AI>I am an assistant<用户>Another question<AI>"},
    {"DeepSeek-V2",
     "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\\n\\n' }}{% elif message['role'] == 'assistant' %}{{ 'Assistant: ' + message['content'] + eos_token }}{% elif message['role'] == 'system' %}{{ message['content'] + '\\n\\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}",
     "", "<｜end▁of▁sentence｜>",
     "You are a helpful assistant\n\nUser: Hello\n\nAssistant: Hi there<｜end▁of▁sentence｜>User: Who are you\n\nAssistant:    I am an assistant   <｜end▁of▁sentence｜>User: Another question\n\nAssistant:"},
    {"ibm-granite/granite-3.0-8b-instruct",
     "{%- if tools %}\n    {{- '<|start_of_role|>available_tools<|end_of_role|>\n' }}\n    {%- for tool in tools %}\n    {{- tool | tojson(indent=4) }}\n    {%- if not loop.last %}\n        {{- '\n\n' }}\n    {%- endif %}\n    {%- endfor %}\n    {{- '<|end_of_text|>\n' }}\n{%- endif %}\n{%- for message in messages %}\n    {%- if message['role'] == 'system' %}\n    {{- '<|start_of_role|>system<|end_of_role|>' + message['content'] + '<|end_of_text|>\n' }}\n    {%- elif message['role'] == 'user' %}\n    {{- '<|start_of_role|>user<|end_of_role|>' + message['content'] + '<|end_of_text|>\n' }}\n    {%- elif message['role'] == 'assistant' %}\n    {{- '<|start_of_role|>assistant<|end_of_role|>'  + message['content'] + '<|end_of_text|>\n' }}\n    {%- elif message['role'] == 'assistant_tool_call' %}\n    {{- '<|start_of_role|>assistant<|end_of_role|><|tool_call|>' + message['content'] + '<|end_of_text|>\n' }}\n    {%- elif message['role'] == 'tool_response' %}\n    {{- '<|start_of_role|>tool_response<|end_of_role|>' + message['content'] + '<|end_of_text|>\n' }}\n    {%- endif %}\n    {%- if loop.last and add_generation_prompt %}\n    {{- '<|start_of_role|>assistant<|end_of_role|>' }}\n    {%- endif %}\n{%- endfor %}",
     "", "",
     "<|start_of_role|>system<|end_of_role|>You are a helpful assistant<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Hello<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>Hi there<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Who are you<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>   I am an assistant   <|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Another question<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>"},
    {"Infinigence/Megrez-3B-Instruct",
     "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|role_start|>system<|role_end|>你是Megrez-3B-Instruct，将针对用户的问题给出详细的、积极的回答。<|turn_end|>' }}{% endif %}{{ '<|role_start|>' + message['role'] + '<|role_end|>' + message['content'] + '<|turn_end|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|role_start|>assistant<|role_end|>' }}{% endif %}",
     "", "",
     "<|role_start|>system<|role_end|>You are a helpful assistant<|turn_end|><|role_start|>user<|role_end|>Hello<|turn_end|><|role_start|>assistant<|role_end|>Hi there<|turn_end|><|role_start|>user<|role_end|>Who are you<|turn_end|><|role_start|>assistant<|role_end|>   I am an assistant   <|turn_end|><|role_start|>user<|role_end|>Another question<|turn_end|><|role_start|>assistant<|role_end|>"},
    {"phi-4",
     "{% for message in messages %}{% if (message['role'] == 'system') %}{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}{% elif (message['role'] == 'user') %}{{'<|im_start|>user<|im_sep|>' + message['content'] + '<|im_end|><|im_start|>assistant<|im_sep|>'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|im_end|>'}}{% endif %}{% endfor %}",
     "", "",
     "<|im_start|>system<|im_sep|>You are a helpful assistant<|im_end|><|im_start|>user<|im_sep|>Hello<|im_end|><|im_start|>assistant<|im_sep|>Hi there<|im_end|><|im_start|>user<|im_sep|>Who are you<|im_end|><|im_start|>assistant<|im_sep|>   I am an assistant   <|im_end|><|im_start|>user<|im_sep|>Another question<|im_end|><|im_start|>assistant<|im_sep|>"},
    {"inclusionAI/Ling-lite",
     "{% for message in messages %}{% set role = message['role'] | lower %}{% if role == 'user' %}{% set role = 'HUMAN' %}{% endif %}{% set role = role | upper %}{{ '<role>' + role + '</role>' + message['content'] }}{% endfor %}{% if add_generation_prompt %}{{ '<role>ASSISTANT</role>' }}{% endif %}",
     "", "",
     "<role>SYSTEM</role>You are a helpful assistant<role>HUMAN</role>Hello<role>ASSISTANT</role>Hi there<role>HUMAN</role>Who are you<role>ASSISTANT</role>   I am an assistant   <role>HUMAN</role>Another question<role>ASSISTANT</role>"},
    {"ByteDance-Seed/Seed-OSS-36B-Instruct",
     "{# <seed:bos> #}{%- for message in messages %}{%- if message.role in [\"user\", \"system\"] %}{{ bos_token + message.role + \"\\n\" + message.content + eos_token }}{%- elif message.role == \"assistant\" %}{{ bos_token + message.role }}{%- if message.content is defined and message.content is string and message.content|trim|length > 0 %}{{ \"\\n\" + message.content|trim + eos_token }}{%- endif %}{%- else %}{{ bos_token + message.role + \"\\n\" + message.content + eos_token }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{ bos_token + \"assistant\\n\" }}{%- endif %}",
     "<seed:bos>", "<seed:eos>",
     "<seed:bos>system\nYou are a helpful assistant<seed:eos><seed:bos>user\nHello<seed:eos><seed:bos>assistant\nHi there<seed:eos><seed:bos>user\nWho are you<seed:eos><seed:bos>assistant\nI am an assistant<seed:eos><seed:bos>user\nAnother question<seed:eos><seed:bos>assistant\n"},
    {"yandex/YandexGPT-5-Lite-8B-instruct (system message merged into the first user turn, as llama.cpp does)",
     "<s>{%- set names = {'assistant': ' Ассистент:', 'user': ' Пользователь:'} %}\n{%- set tools_prefix = 'Тебе доступны следующие функции:' %}\n{%- macro __render_tool(tool) %}\n    {%- set name = tool.function.name %}\n    {%- set description = tool.function.description|default('') %}\n    {%- set parameters = tool.function.parameters|tojson %}\n    {{- '\\n' }}function {{ '{' }}'name':'{{ name }}',\n    {%- if tool.function.description %}'description':'{{ description }}',{% endif %}\n'parameters':{{ parameters }}\n    {{- '}' }}\n{%- endmacro %}\n{%- macro __render_tools(tools) %}\n    {{- tools_prefix }}\n    {%- for tool in tools %}\n        {{- __render_tool(tool) }}\n    {%- endfor %}\n    {{- '\\n\\n' }}\n{%- endmacro %}\n{%- macro __render_tool_message(message) %}\n    {{- '\\n\\nРезультат вызова' }} {{ message.name }}: {{ message.content }} {{ '\\n\\n' }}\n{%- endmacro %}\n{%- if tools -%}\n    {{- __render_tools(tools) }}\n{%- endif -%}\n{%- macro __render_user_message(message) %}\n{{ names.user }} {{ message.content + '\\n\\n' }}\n{%- endmacro %}\n{%- macro __render_assistant_message(message) %}\n    {{- names.assistant }}\n    {%- set call = message['function_call'] %}\n    {%- if call %}\n        {{- '\\n[TOOL_CALL_START]' }}{{ call.name }}{{ '\\n' }}{{ call.arguments|tojson }}\n    {%- else %}\n        {{- ' ' + message.content + '\\n\\n' }}\n    {%- endif %}\n{%- endmacro %}\n{%- if not add_generation_prompt is defined %}\n{%- set add_generation_prompt = false %}\n{%- endif %}\n{%- for message in messages %}\n    {%- if message['role'] == 'user' %}\n        {{- __render_user_message(message) }}\n    {%- endif %}\n    {%- if message.role == 'assistant' and not loop.last %}\n        {{- __render_assistant_message(message) }}\n    {%- endif %}\n    {%- if message.role == 'tool' %}\n        {{- __render_tool_message(message) }}\n    {%- endif %}\n    {%- if loop.last %}\n        {{- ' Ассистент:[SEP]' }}\n    {%- endif %}\n{%- endfor %}\n",
     "<s>", "",
     "<s> Пользователь: You are a helpful assistant\nHello\n\n Ассистент: Hi there\n\n Пользователь: Who are you\n\n Ассистент:    I am an assistant   \n\n Пользователь: Another question\n\n Ассистент:[SEP]"},
};

const std::vector<BuiltinCase> llama_cpp_builtin_cases = {
    {"mistral-v1", "", "</s>", " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST]    I am an assistant   </s> [INST] Another question [/INST]"},
    {"mistral-v3", "", "</s>", "[INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST] I am an assistant</s>[INST] You are a helpful assistant\n\nAnother question[/INST]"},
    {"mistral-v7", "", "</s>", "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another question[/INST]"},
    {"deepseek", "", "<｜end▁of▁sentence｜>", "You are a helpful assistant\n\nUser: Hello\n\nAssistant: Hi there<｜end▁of▁sentence｜>User: Who are you\n\nAssistant:    I am an assistant   <｜end▁of▁sentence｜>User: Another question\n\nAssistant:"},
    {"chatml", "", "", "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n"},
};

const std::vector<FamilyCase> family_cases = {
    {"qwen2.5", "default system prompt", {{"user", "Hello"}, {"assistant", "Hi there"}, {"user", "Who are you"}, {"assistant", "   I am an assistant   "}, {"user", "Another question"}}, true, "", "<|im_end|>",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen2.5", "own system prompt", {{"system", "You are a helpful assistant"}, {"user", "Hello"}, {"assistant", "Hi there"}, {"user", "Who are you"}, {"assistant", "   I am an assistant   "}, {"user", "Another question"}}, false, "", "<|im_end|>",
     "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n"},
    {"qwen3", "earlier reasoning dropped", {{"user", "2+2?"}, {"assistant", "<think>\nadd them\n</think>\n\n4"}, {"user", "3+3?"}}, true, "", "<|im_end|>",
     "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen3", "last turn keeps its reasoning", {{"user", "2+2?"}, {"assistant", "<think>\nadd them\n</think>\n\n4"}}, false, "", "<|im_end|>",
     "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\nadd them\n</think>\n\n4<|im_end|>\n"},
    {"smollm2", "default system prompt", {{"user", "Hello"}, {"assistant", "Hi there"}, {"user", "Who are you"}, {"assistant", "   I am an assistant   "}, {"user", "Another question"}}, true, "<|im_start|>", "<|im_end|>",
     "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n"},
    {"llama2", "system folded into the first turn", {{"system", "You are a helpful assistant"}, {"user", "Hello"}, {"assistant", "Hi there"}, {"user", "Who are you"}, {"assistant", "   I am an assistant   "}, {"user", "Another question"}}, true, "<s>", "</s>",
     "<s>[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s><s>[INST] Who are you [/INST] I am an assistant </s><s>[INST] Another question [/INST]"},
    {"llama3", "generation prompt", {{"system", "You are a helpful assistant"}, {"user", "Hello"}, {"assistant", "Hi there"}, {"user", "Who are you"}, {"assistant", "   I am an assistant   "}, {"user", "Another question"}}, true, "<|begin_of_text|>", "<|eot_id|>",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3.1", "date header", {{"system", "You are a helpful assistant"}, {"user", "Hello"}, {"assistant", "Hi there"}, {"user", "Who are you"}, {"assistant", "   I am an assistant   "}, {"user", "Another question"}}, true, "<|begin_of_text|>", "<|eot_id|>",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3.1", "no system message", {{"user", "Hello"}, {"assistant", "Hi there"}, {"user", "Who are you"}, {"assistant", "   I am an assistant   "}, {"user", "Another question"}}, false, "<|begin_of_text|>", "<|eot_id|>",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|>"},
    {"phi3", "generation prompt", {{"system", "You are a helpful assistant"}, {"user", "Hello"}, {"assistant", "Hi there"}, {"user", "Who are you"}, {"assistant", "   I am an assistant   "}, {"user", "Another question"}}, true, "<s>", "<|endoftext|>",
     "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n"},
    {"phi3", "eos without generation prompt", {{"system", "You are a helpful assistant"}, {"user", "Hello"}, {"assistant", "Hi there"}, {"user", "Who are you"}, {"assistant", "   I am an assistant   "}, {"user", "Another question"}}, false, "<s>", "<|endoftext|>",
     "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n<|endoftext|>"},
    {"zephyr", "generation prompt", {{"system", "You are a helpful assistant"}, {"user", "Hello"}, {"assistant", "Hi there"}, {"user", "Who are you"}, {"assistant", "   I am an assistant   "}, {"user", "Another question"}}, true, "<s>", "</s>",
     "<|system|>\nYou are a helpful assistant</s>\n<|user|>\nHello</s>\n<|assistant|>\nHi there</s>\n<|user|>\nWho are you</s>\n<|assistant|>\n   I am an assistant   </s>\n<|user|>\nAnother question</s>\n<|assistant|>\n"},
    {"zephyr", "no generation prompt", {{"system", "You are a helpful assistant"}, {"user", "Hello"}, {"assistant", "Hi there"}, {"user", "Who are you"}, {"assistant", "   I am an assistant   "}, {"user", "Another question"}}, false, "<s>", "</s>",
     "<|system|>\nYou are a helpful assistant</s>\n<|user|>\nHello</s>\n<|assistant|>\nHi there</s>\n<|user|>\nWho are you</s>\n<|assistant|>\n   I am an assistant   </s>\n<|user|>\nAnother question</s>\n"},
    {"gemma", "model turns", {{"user", "Hello"}, {"assistant", "Hi there"}, {"user", "Who are you"}, {"assistant", "   I am an assistant   "}, {"user", "Another question"}}, true, "<bos>", "<eos>",
     "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n"},
    {"deepseek-r1", "think opener", {{"user", "2+2?"}, {"assistant", "<think>\nadd them\n</think>\n\n4"}, {"user", "3+3?"}}, true, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
     "<｜begin▁of▁sentence｜><｜User｜>2+2?<｜Assistant｜>\n\n4<｜end▁of▁sentence｜><｜User｜>3+3?<｜Assistant｜><think>\n"},
    {"mistral-v7", "system prompt", {{"system", "You are a helpful assistant"}, {"user", "Hello"}, {"assistant", "Hi there"}, {"user", "Who are you"}, {"assistant", "   I am an assistant   "}, {"user", "Another question"}}, true, "<s>", "</s>",
     "<s>[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another question[/INST]"},
};

const std::string llama3_2_expected = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 15 Mar 2025\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
const std::string qwen3_no_thinking_expected = "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
const std::string qwen2_5_tools_expected = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"location\": {\"type\": \"string\"}}, \"required\": [\"location\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp\": 20}\n</tool_response><|im_end|>\n<|im_start|>assistant\n";
// clang-format on

/// A vocabulary-only GGUF image: tokens, BOS/EOS ids, and a template if given.
caflm::GgufFile vocabulary_file(const std::vector<std::string>& tokens, const char* chat_template) {
  caflm::GgufWriter writer;
  writer.add_string("general.architecture", "llama");
  writer.add_string("tokenizer.ggml.model", "gpt2");
  writer.add_string_array("tokenizer.ggml.tokens", tokens);
  writer.add_uint32("tokenizer.ggml.bos_token_id", 0);
  writer.add_uint32("tokenizer.ggml.eos_token_id", 1);
  if (chat_template)
    writer.add_string("tokenizer.chat_template", chat_template);
  return caflm::GgufFile::from_bytes(writer.to_bytes());
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

} // namespace

TEST_CASE("llama.cpp's template test vectors render byte for byte") {
  for (const TemplateCase& c : llama_cpp_cases) {
    INFO(c.name);
    std::vector<ChatMessage> messages = conversation;
    if (c.name.rfind("yandex", 0) == 0) { // it has no system role
      messages.erase(messages.begin(), messages.begin() + 2);
      messages.insert(messages.begin(), {"user", "You are a helpful assistant\nHello"});
    }
    ChatTemplate t(c.source, c.bos, c.eos);
    CHECK(t.render(messages, true) == c.expected);
  }
}

TEST_CASE("built-in templates match llama.cpp's expectations for their families") {
  for (const BuiltinCase& c : llama_cpp_builtin_cases) {
    INFO(c.name);
    CHECK(ChatTemplate::builtin(c.name, c.bos, c.eos).render(conversation, true) == c.expected);
  }
}

TEST_CASE("built-in templates render as jinja2 renders the published ones") {
  for (const FamilyCase& c : family_cases) {
    INFO(c.name << ": " << c.what);
    CHECK(ChatTemplate::builtin(c.name, c.bos, c.eos).render(c.messages, c.add_generation_prompt) ==
          c.expected);
  }
}

TEST_CASE("Llama 3.2 writes today's date from strftime_now") {
  ChatTemplate t = ChatTemplate::builtin("llama3.2", "<|begin_of_text|>", "<|eot_id|>");
  t.set_fixed_time(1742040000); // 2025-03-15 12:00 UTC: the 15th in every zone within 11 hours
  CHECK(t.render(conversation, true) == llama3_2_expected);
}

TEST_CASE("Qwen3 opens an empty think block when thinking is off") {
  ChatTemplate t = ChatTemplate::builtin("qwen3", "", "<|im_end|>");
  Value messages =
      Value::list({Value::dict({{"role", Value("user")}, {"content", Value("2+2?")}}),
                   Value::dict({{"role", Value("assistant")},
                                {"content", Value("<think>\nadd them\n</think>\n\n4")}}),
                   Value::dict({{"role", Value("user")}, {"content", Value("3+3?")}})});
  CHECK(t.render_values(messages, true, {{"enable_thinking", Value(false)}}) ==
        qwen3_no_thinking_expected);
}

TEST_CASE("Qwen2.5 renders tools and tool calls") {
  Value tool = Value::dict(
      {{"type", Value("function")},
       {"function",
        Value::dict(
            {{"name", Value("get_weather")},
             {"description", Value("Get the weather")},
             {"parameters",
              Value::dict({{"type", Value("object")},
                           {"properties",
                            Value::dict({{"location", Value::dict({{"type", Value("string")}})}})},
                           {"required", Value::list({Value("location")})}})}})}});
  Value call = Value::dict(
      {{"type", Value("function")},
       {"function", Value::dict({{"name", Value("get_weather")},
                                 {"arguments", Value::dict({{"location", Value("Paris")}})}})}});
  Value messages =
      Value::list({Value::dict({{"role", Value("user")}, {"content", Value("Weather in Paris?")}}),
                   Value::dict({{"role", Value("assistant")},
                                {"content", Value("")},
                                {"tool_calls", Value::list({call})}}),
                   Value::dict({{"role", Value("tool")}, {"content", Value("{\"temp\": 20}")}})});
  ChatTemplate t = ChatTemplate::builtin("qwen2.5", "", "<|im_end|>");
  CHECK(t.render_values(messages, true, {{"tools", Value::list({tool})}}) ==
        qwen2_5_tools_expected);
}

TEST_CASE("a template's raise_exception becomes an error with its message") {
  // google/gemma-7b-it and Mistral-7B-Instruct-v0.2 reject a system message.
  std::string gemma = error_of([] { ChatTemplate::builtin("gemma").render(conversation, true); });
  CHECK(gemma == "the chat template refused the messages: System role not supported");
  ChatTemplate old_mistral(
      "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
      "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
      "user/assistant/user/assistant/...') }}{% endif %}{% endfor %}");
  CHECK(error_of([&] {
          old_mistral.render(conversation, true);
        }).find("Conversation roles must alternate") != std::string::npos);
}

TEST_CASE("built-in names, aliases and unknown names") {
  std::vector<std::string> names = ChatTemplate::builtin_names();
  for (const char* family : {"chatml", "qwen2.5", "qwen3", "llama2", "llama3", "llama3.1",
                             "llama3.2", "mistral-v1", "mistral-v3", "mistral-v7", "phi3", "zephyr",
                             "gemma", "deepseek", "deepseek-r1", "smollm2"})
    CHECK(std::find(names.begin(), names.end(), family) != names.end());
  CHECK(ChatTemplate::builtin("tinyllama").name() == "zephyr");
  CHECK(ChatTemplate::builtin("llama3.3").source() == *ChatTemplate::builtin_source("llama3.1"));
  std::string unknown = error_of([] { ChatTemplate::builtin("vicuna"); });
  CHECK(unknown.find("unknown chat template 'vicuna'") != std::string::npos);
  CHECK(unknown.find("chatml") != std::string::npos);
  CHECK(unknown.find("llama3.1") != std::string::npos);
}

TEST_CASE("a template that does not parse names the position and the options") {
  std::string error = error_of([] { ChatTemplate("{% for m in messages %}{{ m.content }}"); });
  INFO(error);
  CHECK(error.find("line 1, column 39: missing {% endfor %}") != std::string::npos);
  CHECK(error.find("--chat-template NAME with one of: chatml") != std::string::npos);
}

TEST_CASE("a GGUF file's own template, with its BOS and EOS token texts") {
  caflm::GgufFile file = vocabulary_file(
      {"<|begin|>", "<|end|>", "a"},
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}"
      "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}");
  ChatTemplate t = ChatTemplate::from_gguf(file);
  CHECK(t.render({{"user", "hi"}}, true) == "<|begin|>[user]hi<|end|>[assistant]");
  CHECK(t.render({{"user", "hi"}}, false) == "<|begin|>[user]hi<|end|>");
  // --chat-template NAME keeps the file's token texts.
  CHECK(ChatTemplate::builtin("zephyr", file).render({{"user", "hi"}}, true) ==
        "<|user|>\nhi<|end|>\n<|assistant|>\n");
}

TEST_CASE("a GGUF file without a template gets the one its special tokens name") {
  CHECK(ChatTemplate::from_gguf(vocabulary_file({"<s>", "<|im_end|>", "<|im_start|>"}, nullptr))
            .name() == "chatml");
  CHECK(ChatTemplate::from_gguf(
            vocabulary_file(
                {"<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|eom_id|>"}, nullptr))
            .name() == "llama3.1");
  std::string error = error_of([] {
    ChatTemplate::from_gguf(vocabulary_file({"<s>", "</s>", "a"}, nullptr));
  });
  CHECK(error.find("no tokenizer.chat_template") != std::string::npos);
  CHECK(error.find("--chat-template NAME") != std::string::npos);
}

TEST_CASE("a rendered prompt's BOS is not doubled and its special tokens are tokens") {
  const caflm::Tokenizer tokenizer(
      std::make_shared<const caflm::Vocabulary>(caflm::Vocabulary::from_gguf(caflm::GgufFile::open(
          std::string(CAFLM_TESTDATA_DIR) + "/vocab/ggml-vocab-llama-spm.gguf"))));
  const caflm::TokenId bos = *tokenizer.vocabulary().bos();
  const caflm::TokenId eos = *tokenizer.vocabulary().eos();
  REQUIRE(tokenizer.vocabulary().add_bos());
  // What a llama2-style template renders: its own BOS, a turn, an EOS.
  const std::vector<caflm::TokenId> with_bos =
      caflm::encode_chat_prompt(tokenizer, "<s>[INST] Hi [/INST] Hello</s>");
  REQUIRE(with_bos.size() > 3);
  CHECK(with_bos[0] == bos);
  CHECK(with_bos[1] != bos);
  CHECK(with_bos.back() == eos);
  CHECK(std::count(with_bos.begin(), with_bos.end(), bos) == 1);
  // A template that writes no BOS gets the one the vocabulary asks for.
  const std::vector<caflm::TokenId> without_bos =
      caflm::encode_chat_prompt(tokenizer, "[INST] Hi [/INST] Hello</s>");
  CHECK(without_bos == with_bos);
}
