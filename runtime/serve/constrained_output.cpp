#include "runtime/serve/constrained_output.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace olmo2 {

ConstrainedOutput::ConstrainedOutput(std::shared_ptr<const structured::Grammar> grammar,
                                     std::shared_ptr<const structured::Vocabulary> vocabulary, std::string param)
    : matcher_(std::move(grammar), vocabulary), words_((vocabulary->size() + 63) / 64), param_(std::move(param)) {}

NextMask ConstrainedOutput::next(int64_t remaining, std::span<const int32_t> banned) const {
  try {
    return mask(remaining, banned);
  } catch (const std::exception& e) {  // a grammar past the matcher's bounds: this request's error, not the server's
    NextMask out;
    out.error = std::string("the constraint cannot be followed: ") + e.what();
    out.status = 400;
    out.param = param_;
    return out;
  }
}

NextMask ConstrainedOutput::mask(int64_t remaining, std::span<const int32_t> banned) const {
  NextMask out;
  auto bits = std::make_shared<std::vector<uint64_t>>(static_cast<size_t>(words_), 0);
  const auto any = [&] { return std::any_of(bits->begin(), bits->end(), [](uint64_t w) { return w != 0; }); };
  const auto ban = [&] {
    for (const int32_t id : banned) {
      if (id >= 0 && id < words_ * 64) (*bits)[static_cast<size_t>(id >> 6)] &= ~(uint64_t{1} << (id & 63));
    }
  };
  matcher_.fill_mask(*bits, std::max<int64_t>(remaining, 1));
  ban();
  if (!any()) {  // too few tokens left for a complete output: a valid prefix, cut at max_tokens
    matcher_.fill_mask(*bits, std::numeric_limits<int32_t>::max());
    const bool before_ban = any();
    ban();
    out.truncating = true;
    if (!any()) {
      out.truncating = false;
      if (before_ban) {
        out.error = "min_tokens cannot be met: the constrained output is complete and only EOS may follow";
        out.param = "min_tokens";
        out.status = 400;
      } else {
        out.error = "internal error: the constraint allows no token here (the grammar has no way on)";
      }
      return out;
    }
  }
  out.allowed = std::move(bits);
  return out;
}

bool ConstrainedOutput::accept(int32_t id) {
  try {
    return matcher_.accept(id);
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace olmo2
