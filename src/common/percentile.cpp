#include "nanochat/common/percentile.h"

#include <algorithm>
#include <cmath>

namespace nanochat {

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t i = std::min(values.size() - 1, (size_t)std::floor(q * (double)values.size()));
  return values[i];
}

}  // namespace nanochat
