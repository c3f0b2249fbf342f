// The project's one percentile (the benches, infer-bench, the flood tests): the value at rank
// floor(q * n) of the sorted values, capped at n - 1, as upstream's median sorted[n // 2] at
// q = 0.5; 0 for no values.
#pragma once
#include <vector>

namespace nanochat {

double percentile(std::vector<double> values, double q);

}  // namespace nanochat
