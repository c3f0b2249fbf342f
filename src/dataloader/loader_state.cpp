// The loader's resume state as JSON. The buffered documents are a subsequence of the stream,
// so they are stored as runs: one entry per row group, with half-open ranges of indices.
#include <cstdint>

#include "nanochat/common/error.h"
#include "nanochat/dataloader.h"

namespace nanochat {

nlohmann::json loader_state_to_json(const LoaderState& s) {
  nlohmann::json j;
  j["pq_idx"] = s.last.file;  // upstream's fields, so upstream's rule can resume from them too
  j["rg_idx"] = s.last.row_group;
  j["epoch"] = s.last.epoch;
  j["rank"] = s.rank;
  j["world"] = s.world;
  if (!s.exact) return j;
  j["next"] = {{"epoch", s.next.epoch}, {"file", s.next.file}, {"row_group", s.next.row_group}, {"doc", s.next.doc}};
  nlohmann::json buffer = nlohmann::json::array();
  for (size_t i = 0; i < s.buffered.size();) {
    const DocRef& g = s.buffered[i];
    nlohmann::json ranges = nlohmann::json::array();
    size_t k = i;
    while (k < s.buffered.size() && s.buffered[k].epoch == g.epoch && s.buffered[k].file == g.file &&
           s.buffered[k].row_group == g.row_group) {
      int32_t begin = s.buffered[k].doc, end = begin + 1;
      k++;
      while (k < s.buffered.size() && s.buffered[k].epoch == g.epoch && s.buffered[k].file == g.file &&
             s.buffered[k].row_group == g.row_group && s.buffered[k].doc == end) {
        end++;
        k++;
      }
      ranges.push_back({begin, end});
    }
    buffer.push_back({g.epoch, g.file, g.row_group, ranges});
    i = k;
  }
  j["buffer"] = buffer;
  return j;
}

static int32_t int_field(const nlohmann::json& j, const char* key, int32_t min) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer() || it->get<int64_t>() < min || it->get<int64_t>() > INT32_MAX)
    fail("dataloader state: field '%s' is missing or not an integer >= %d", key, (int)min);
  return it->get<int32_t>();
}

LoaderState loader_state_from_json(const nlohmann::json& j) {
  if (!j.is_object()) fail("dataloader state: not a JSON object");
  LoaderState s;
  s.last = DocPosition{int_field(j, "pq_idx", 0), int_field(j, "rg_idx", 0), int_field(j, "epoch", 1)};
  s.rank = j.contains("rank") ? int_field(j, "rank", 0) : 0;
  s.world = j.contains("world") ? int_field(j, "world", 1) : 1;
  s.exact = j.contains("next");
  if (!s.exact) return s;
  const auto& n = j["next"];
  if (!n.is_object()) fail("dataloader state: 'next' is not an object");
  s.next = DocRef{int_field(n, "epoch", 1), int_field(n, "file", 0), int_field(n, "row_group", 0),
                  int_field(n, "doc", 0)};
  auto bad = [] { fail("dataloader state: 'buffer' must be a list of [epoch, file, row_group, [[begin, end], ...]]"); };
  const auto& buffer = j.value("buffer", nlohmann::json::array());
  if (!buffer.is_array()) bad();
  for (const auto& g : buffer) {
    if (!g.is_array() || g.size() != 4 || !g[3].is_array()) bad();
    for (int k = 0; k < 3; k++)
      if (!g[k].is_number_integer() || g[k].get<int64_t>() < (k == 0 ? 1 : 0)) bad();
    for (const auto& r : g[3]) {
      if (!r.is_array() || r.size() != 2 || !r[0].is_number_integer() || !r[1].is_number_integer()) bad();
      int64_t begin = r[0].get<int64_t>(), end = r[1].get<int64_t>();
      if (begin < 0 || end <= begin || end > INT32_MAX) bad();
      for (int64_t d = begin; d < end; d++)
        s.buffered.push_back(DocRef{g[0].get<int32_t>(), g[1].get<int32_t>(), g[2].get<int32_t>(), (int32_t)d});
    }
  }
  return s;
}

nlohmann::ordered_json loader_state_upstream_json(const std::optional<LoaderState>& state) {
  DocPosition last = state ? state->last : DocPosition();
  return {{"pq_idx", last.file}, {"rg_idx", last.row_group}, {"epoch", last.epoch}};
}

std::optional<LoaderState> loader_state_from_checkpoint(const nlohmann::ordered_json& meta,
                                                        const nlohmann::ordered_json& rank_state) {
  if (rank_state.contains("dataloader_state")) {
    const auto& s = rank_state["dataloader_state"];
    if (s.is_null()) return std::nullopt;  // saved before the first batch was trained
    return loader_state_from_json(s);
  }
  if (meta.contains("dataloader_state_dict") && meta["dataloader_state_dict"].is_object())
    return loader_state_from_json(meta["dataloader_state_dict"]);  // upstream's: row-group resume
  return std::nullopt;
}

}  // namespace nanochat
