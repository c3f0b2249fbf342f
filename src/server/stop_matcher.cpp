// OpenAI's `stop`: the text ends just before the first stop string. A stop string may arrive
// split over several tokens, so the tail that could still grow into one is held back.
#include <algorithm>

#include "server/stop_matcher.h"

namespace nanochat {

std::string StopMatcher::push(const std::string& text) {
  if (stopped_) return "";
  pending_ += text;
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, pending_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  // the longest suffix of pending_ that is a proper prefix of some stop string stays
  size_t keep = 0;
  for (const std::string& s : stops_)
    for (size_t len = std::min(s.size() - 1, pending_.size()); len > keep; len--)
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StopMatcher::finish() {
  std::string out = stopped_ ? "" : pending_;
  pending_.clear();
  return out;
}

}  // namespace nanochat
