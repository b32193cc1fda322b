// Choice constraints (docs/architecture.md §8, "Structured outputs"): grammar text whose
// sentences are exactly the given strings. The strings are factored into a trie of
// their bytes first (root ::= "a" ("lpha" | "rm") | "beta"), so that the matcher
// follows one parse stack however many choices share a prefix.
#include <map>
#include <memory>
#include <vector>

#include "runtime/structured/grammar_impl.h"

namespace olmo2::structured {
namespace {

struct Node {
  bool end = false;  // a choice ends here
  std::map<unsigned char, std::unique_ptr<Node>> next;
  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  /// Iterative: a long choice is a chain of nodes as deep as its bytes, too deep for the
  /// recursion of the members' own destructors.
  ~Node() {
    std::vector<std::unique_ptr<Node>> pending;
    for (auto& [byte, child] : next) pending.push_back(std::move(child));
    next.clear();
    while (!pending.empty()) {
      std::unique_ptr<Node> n = std::move(pending.back());
      pending.pop_back();
      for (auto& [byte, child] : n->next) pending.push_back(std::move(child));
      n->next.clear();
    }
  }
};

void append_escaped(unsigned char c, std::string& text) {
  switch (c) {
    case '"': text += "\\\""; return;
    case '\\': text += "\\\\"; return;
    case '\n': text += "\\n"; return;
    case '\r': text += "\\r"; return;
    case '\t': text += "\\t"; return;
    default:
      if (c < 0x20 || c == 0x7F) {
        static const char* hex = "0123456789ABCDEF";
        text += "\\x";
        text += hex[c >> 4];
        text += hex[c & 15];
      } else {
        text += static_cast<char>(c);  // UTF-8 bytes pass through (the matcher is byte-level)
      }
  }
}

/// The alternatives of `node`'s subtree: each edge with the run of single-child nodes
/// below it as one literal, then the subtree's own alternatives in a group.
void write(const Node& node, std::string& text, int depth) {
  bool first = true;
  if (node.end) {
    text += "\"\"";
    first = false;
  }
  for (const auto& [byte, child] : node.next) {
    if (!first) text += depth == 0 ? "\n  | " : " | ";
    first = false;
    text += '"';
    const Node* n = child.get();
    append_escaped(byte, text);
    while (!n->end && n->next.size() == 1) {
      append_escaped(n->next.begin()->first, text);
      n = n->next.begin()->second.get();
    }
    text += '"';
    if (!n->next.empty()) {
      text += " (";
      write(*n, text, depth + 1);
      text += ")";
    }
  }
}

}  // namespace

std::string choice_grammar(const std::vector<std::string>& choices) {
  if (choices.empty()) OLMO2_CONSTRAINT_ERROR("choices", "a choice constraint needs at least one string; the list is empty");
  Node root;
  for (const auto& c : choices) {
    Node* n = &root;
    for (unsigned char b : c) {
      auto& next = n->next[b];
      if (!next) next = std::make_unique<Node>();
      n = next.get();
    }
    n->end = true;
  }
  std::string text = "root ::= ";
  write(root, text, 0);
  return text + "\n";
}

}  // namespace olmo2::structured
