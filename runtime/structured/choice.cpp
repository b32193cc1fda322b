// Choice constraints (docs/architecture.md §8, "Structured outputs"): grammar text whose
// sentences are exactly the given strings.
#include "runtime/structured/grammar_impl.h"

namespace olmo2::structured {

std::string choice_grammar(const std::vector<std::string>& choices) {
  if (choices.empty()) OLMO2_CONSTRAINT_ERROR("choices", "a choice constraint needs at least one string; the list is empty");
  std::string text = "root ::=";
  for (size_t i = 0; i < choices.size(); ++i) {
    text += i == 0 ? " \"" : "\n  | \"";
    for (unsigned char c : choices[i]) {
      switch (c) {
        case '"': text += "\\\""; break;
        case '\\': text += "\\\\"; break;
        case '\n': text += "\\n"; break;
        case '\r': text += "\\r"; break;
        case '\t': text += "\\t"; break;
        default:
          if (c < 0x20 || c == 0x7F) {
            static const char* hex = "0123456789ABCDEF";
            text += "\\x";
            text += hex[c >> 4];
            text += hex[c & 15];
          } else {
            text += static_cast<char>(c);  // UTF-8 bytes pass through
          }
      }
    }
    text += '"';
  }
  return text + "\n";
}

}  // namespace olmo2::structured
