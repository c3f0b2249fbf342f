// defines: gpt_set_fp8, gpt_fp8_eligible, GptFp8Off
// Which of the model's Linears train in FP8, as upstream fp8.py's module filter.
#include "nanochat/common/device.h"
#include "nanochat/common/error.h"
#include "nanochat/gpt.h"

namespace nanochat {
namespace {

// every Linear of the blocks (lm_head and the gates are not candidates: see gpt.h)
std::vector<Linear> block_linears(GPT& model) {
  std::vector<Linear> out;
  for (Block& b : model->blocks)
    for (Linear l : {b->attn->c_q, b->attn->c_k, b->attn->c_v, b->attn->c_proj, b->mlp->c_fc, b->mlp->c_proj})
      out.push_back(l);
  return out;
}

}  // namespace

bool gpt_fp8_eligible(int64_t in, int64_t out) { return in % 16 == 0 && out % 16 == 0 && std::min(in, out) >= 128; }

void gpt_set_fp8(GPT& model, bool on) {
  if (on && model->device().is_cuda()) {
    for (const CudaDeviceInfo& d : cuda_device_infos(model->device().index(), /*with_memory=*/false))
      if (d.major * 10 + d.minor < 89)
        fail("--fp8 needs a GPU of compute capability 8.9 or newer (Ada, Hopper); %s is %d.%d: train without --fp8",
             d.name.c_str(), d.major, d.minor);
  }
  for (Linear& l : block_linears(model)) l->fp8 = on && gpt_fp8_eligible(l->weight.size(1), l->weight.size(0));
}

GptFp8Off::GptFp8Off(GPT& m) : model(m) {
  for (Linear& l : block_linears(model)) {
    was.push_back(l->fp8);
    l->fp8 = false;
  }
}

GptFp8Off::~GptFp8Off() {
  size_t i = 0;
  for (Linear& l : block_linears(model)) l->fp8 = was[i++];
}

}  // namespace nanochat
