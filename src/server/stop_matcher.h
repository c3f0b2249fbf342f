// OpenAI's stop strings on a text stream (internal to the server module; generation.cpp).
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace nanochat {

// Stop strings on a text stream: push() returns the text safe to emit now, holding back a
// tail that could still begin a stop string; once a stop string appears, stopped() is true
// and the text before it is all that was ever returned. finish() flushes the held tail.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  std::string push(const std::string& text);
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace nanochat
