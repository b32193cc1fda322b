// The OpenAI-compatible API's pieces in one include (docs/architecture.md §8, API).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/serve/api_error.h"
#include "runtime/serve/api_request.h"
#include "runtime/serve/chat_request.h"
#include "runtime/serve/chat_response.h"
#include "runtime/serve/completion_request.h"
#include "runtime/serve/completion_response.h"
#include "runtime/serve/logprobs_json.h"
#include "runtime/serve/response_id.h"
#include "runtime/serve/served_model.h"
#include "runtime/serve/serve_request.h"
#include "runtime/serve/token_text.h"
#include "runtime/serve/tokenize_api.h"
#include "runtime/tokenizer/tokenizer.h"
