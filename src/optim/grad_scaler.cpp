// torch.amp.GradScaler's unscale_/step/update on top of the same two ATen ops it uses:
// _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_.
#include <map>

#include <ATen/ATen.h>

#include "nanochat/common/error.h"
#include "nanochat/dist.h"
#include "nanochat/optim.h"

namespace nanochat {

GradScaler::GradScaler(torch::Device device, double init_scale, double growth_factor, double backoff_factor,
                       int64_t growth_interval)
    : growth_factor_(growth_factor), backoff_factor_(backoff_factor), growth_interval_(growth_interval) {
  auto f32 = torch::TensorOptions().dtype(at::kFloat).device(device);
  scale_ = at::full({1}, init_scale, f32);
  growth_tracker_ = at::zeros({1}, f32.dtype(at::kInt));
  found_inf_ = at::zeros({1}, f32);
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const { return loss * scale_.to(loss.scalar_type()); }

bool GradScaler::step(MuonAdamW& opt, Dist* dist) {
  found_inf_.zero_();
  torch::Tensor inv_scale = scale_.reciprocal();
  // the ATen op takes grads of one dtype and device per call, as GradScaler groups them
  std::map<std::pair<int, int>, std::vector<torch::Tensor>> by_kind;
  for (OptimGroup& g : opt.groups())
    for (torch::Tensor& p : g.params)
      if (p.grad().defined()) by_kind[{(int)p.grad().scalar_type(), (int)p.grad().device().type()}].push_back(p.grad());
  for (auto& [kind, grads] : by_kind) at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale);
  if (dist && dist->world_size() > 1) dist->all_reduce(found_inf_, ReduceOp::MAX);
  const bool finite = found_inf_.item<float>() == 0.0f;  // the one host sync, as GradScaler.step
  if (finite) opt.step();
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, growth_factor_, backoff_factor_, growth_interval_);
  return finite;
}

double GradScaler::scale_value() const { return scale_.item<double>(); }

nlohmann::json GradScaler::state_json() const {
  return {{"scale", scale_value()}, {"growth_tracker", growth_tracker_.item<int64_t>()}};
}

void GradScaler::load_state(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("scale") || !j["scale"].is_number() || !j.contains("growth_tracker") ||
      !j["growth_tracker"].is_number_integer())
    fail("grad scaler state: expected {\"scale\": number, \"growth_tracker\": integer}");
  scale_.fill_(j["scale"].get<double>());
  growth_tracker_.fill_(j["growth_tracker"].get<int64_t>());
}

}  // namespace nanochat
